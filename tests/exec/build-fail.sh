#!/bin/sh
# build-fail.sh [ARG...]: a build that fails the way compilers do.
echo "compiling main.c"
echo "main.c:3: error: expected ';' before '}'" >&2
exit 2
