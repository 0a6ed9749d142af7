#!/usr/bin/env bash
# Installs Perdure from build dir $1 into a temporary prefix, builds the
# consumer project in $2 against it (find_package(perdure CONFIG)) and runs
# it. Used by ctest (package.consumer). $3: compiler and linker flags the
# installed libraries need (a sanitized build's).
set -euo pipefail
build_dir=$1
consumer_src=$2
flags=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
# The concept folders under detail/ are not installed: no installed header
# may include one.
if grep -rnE '#include "perdure/([a-z]+/)?detail/[a-z_]+/' \
     "$work/prefix/include"; then
  echo "installed headers include machinery that is not installed" >&2
  exit 1
fi
cmake -S "$consumer_src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" > "$work/configure.log" \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j2 > "$work/build.log" \
  || { cat "$work/build.log"; exit 1; }
"$work/build/consumer" "$work/consumer.db"
