#!/bin/bash
# Session 52: the session-51 measurement repeated unchanged on this session's machine (AMD EPYC,
# AVX-512), nothing else running.
set -e
exec bash "$(dirname "$0")/../native_s51/measure.sh" docs/measured/graph/native_s52
