#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
sed -i 's/^prot = /port = /' config.ini
