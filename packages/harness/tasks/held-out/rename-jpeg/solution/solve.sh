#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
for f in photos/*.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done
