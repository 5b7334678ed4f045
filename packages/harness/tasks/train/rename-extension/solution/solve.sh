#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
for f in notes/*.txt; do mv "$f" "${f%.txt}.md"; done
