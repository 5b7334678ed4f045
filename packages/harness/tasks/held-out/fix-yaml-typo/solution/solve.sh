#!/bin/bash
# The scripted solver: one shell command per line, run in /app.
sed -i 's/hots:/host:/' settings.yaml
