#!/usr/bin/env bash
# Builds the C# client with Mono's compiler at the language version Unity takes, then runs its tests
# against live `ferry node` processes (FERRY_BIN, or the workspace's target/debug/ferry).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build
mcs -langversion:7.2 -target:library -warnaserror+ -out:build/Ferry.Client.dll src/*.cs
mcs -langversion:7.2 -warnaserror+ -out:build/ferry-client-tests.exe src/*.cs test/*.cs
mono --debug build/ferry-client-tests.exe
