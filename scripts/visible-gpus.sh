#!/usr/bin/env bash
# Prints how many GPUs a CUDA program started from here can use: the
# driver's count (nvidia-smi -L), cut to CUDA_VISIBLE_DEVICES when that is
# set. CUDA reads the list up to its first entry that names no GPU, so ""
# and "-1" hide them all and "0,1,-1,2" shows two.
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
n=${n:-0}
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
  visible=0
  IFS=',' read -r -a ids <<< "$CUDA_VISIBLE_DEVICES"
  for id in "${ids[@]}"; do
    id=${id//[[:space:]]/}
    if [[ $id =~ ^[0-9]+$ ]]; then
      [ "$id" -lt "$n" ] || break
    elif [[ ! $id =~ ^(GPU|MIG)- ]]; then
      break
    fi
    visible=$((visible + 1))
  done
  [ "$visible" -ge "$n" ] || n=$visible
fi
echo "$n"
