#!/bin/sh
# usage: consumer_test.sh BUILD_DIR VERSION
# Installs the build into a temporary prefix and builds tests/package/consumer against it twice: with
# find_package(uvmpool) (CMake package and version file) and with pkg-config; runs what was built.
set -eu
build=$1 version=$2
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null

cmake -S "$here/consumer" -B "$prefix/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" -DWANT_VERSION="$version" \
  >"$prefix/configure.log" 2>&1 || { cat "$prefix/configure.log"; exit 1; }
cmake --build "$prefix/consumer-build" >"$prefix/build.log" 2>&1 || { cat "$prefix/build.log"; exit 1; }
"$prefix/consumer-build/linked"
"$prefix/consumer-build/looked_up" | grep -q "uvmpool not loaded"
LD_PRELOAD=$(ls "$prefix"/lib*/libuvmpool.so) "$prefix/consumer-build/looked_up" | grep "uvmpool $version"

pc=$(dirname "$(ls "$prefix"/lib*/pkgconfig/uvmpool.pc)")
[ "$(PKG_CONFIG_PATH=$pc pkg-config --modversion uvmpool)" = "$version" ]
# shellcheck disable=SC2046  # the flags are words
cc -o "$prefix/pc-linked" "$here/consumer/consumer.c" -DWANT_VERSION="\"$version\"" \
  $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs uvmpool) -Wl,-rpath,"$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir uvmpool)"
"$prefix/pc-linked"
echo "consumer built with find_package(uvmpool) and with pkg-config"
