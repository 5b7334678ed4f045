#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
mkdir -p backup
cp src/main.c backup/main.c
