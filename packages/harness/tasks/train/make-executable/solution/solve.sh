#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
chmod +x run.sh
