#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
sort words.txt > sorted.txt
