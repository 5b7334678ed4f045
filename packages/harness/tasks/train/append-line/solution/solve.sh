#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
echo done >> todo.txt
