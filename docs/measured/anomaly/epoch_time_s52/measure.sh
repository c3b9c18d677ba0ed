#!/bin/bash
# Session 52 (the kernels on torch's threads): session 51's measurement of the Tolokers
# detector's epoch, rerun unchanged.
set -e
exec bash "$(dirname "$0")/../epoch_time_s51/measure.sh" docs/measured/anomaly/epoch_time_s52 \
    runs/s52
