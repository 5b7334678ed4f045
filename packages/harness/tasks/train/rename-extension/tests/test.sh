#!/bin/bash
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
if [ -f notes/monday.md ] && [ -f notes/tuesday.md ] && [ -f notes/wednesday.md ] && [ -z "$(ls notes/*.txt 2>/dev/null)" ] && [ "$(cat notes/monday.md)" = "gym" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
