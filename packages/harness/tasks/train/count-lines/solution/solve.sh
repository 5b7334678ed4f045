#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
wc -l < data.txt > count.txt
