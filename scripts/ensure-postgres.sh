#!/usr/bin/env bash
# Makes sure Debian's PostgreSQL server is installed: the cluster tests and benchmarks start a private server of
# their own (packages/harness/src/PostgresProcess.ts: initdb in a temporary directory, a free loopback port). The
# distribution's package, from the machine's configured sources; the package's own cluster service is not used.
set -euo pipefail

[ "$(uname -s)" = "Linux" ] || exit 0
for dir in /usr/lib/postgresql/*/bin; do
  [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && exit 0
done
command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && exit 0

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "envtrain: PostgreSQL is not installed, so the cluster tests (packages/harness/test/Cluster*.test.ts) will fail." >&2
  echo "Install Debian's package as root:" >&2
  echo "  sudo sh -c 'apt-get update && apt-get install -y postgresql'" >&2
  exit 0
fi
echo "envtrain: installing Debian's PostgreSQL (postgresql) for the cluster tests…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq postgresql >&2
echo "envtrain: $(dpkg-query -W -f='postgresql ${Version}' postgresql 2>/dev/null || echo 'PostgreSQL installed')" >&2
