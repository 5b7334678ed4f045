#!/usr/bin/env bash
# Makes sure Debian's PostgreSQL server is installed: the cluster tests and benchmarks start a private server of
# their own (packages/harness/src/PostgresProcess.ts: initdb in a temporary directory, a free loopback port). The
# distribution's package, from the machine's configured sources; the package's own cluster service is not used.
set -euo pipefail
source "$(dirname "$0")/lib/debian-package.sh"

[ "$(uname -s)" = "Linux" ] || exit 0
for dir in /usr/lib/postgresql/*/bin; do
  [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && exit 0
done
command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && exit 0
debian_package_install postgresql \
  "the cluster tests (packages/harness/test/Cluster*.test.ts) fail without it; training does not need it." optional \
  "dpkg-query -W -f='postgresql \${Version}' postgresql"
