#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
tr a-z A-Z < name.txt > NAME.txt
