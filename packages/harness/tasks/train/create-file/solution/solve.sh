#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
echo 'hello world' > hello.txt
