#!/bin/bash
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
if [ "$(cat config.ini)" = "$(printf "[server]\nhost = 127.0.0.1\nport = 8080\ndebug = false")" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
