#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
awk '{s+=$1} END {print s}' numbers.txt > sum.txt
