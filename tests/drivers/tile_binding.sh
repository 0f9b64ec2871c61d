#!/bin/sh
# As Aurora's GPU binding script (gpu_tile_compact.sh) does under PALS: each local rank gets tiles of its own in
# ZE_AFFINITY_MASK (TILES_PER_RANK, default 6), then runs the rest of its command line.
local=${PALS_LOCAL_RANKID:-${MPI_LOCALRANKID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}}
per=${TILES_PER_RANK:-6}
first=$((local * per))
ids=$first
i=1
while [ "$i" -lt "$per" ]; do
  ids="$ids,$((first + i))"
  i=$((i + 1))
done
export ZE_AFFINITY_MASK="$ids"
exec "$@"
