#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
wc -w < text.txt > words.txt
