# Sourced by the GPU scripts: lantern links NCCL (tensor parallelism, docs/tensor-parallel.md).
# Use the system's libnccl.so.2, else the CUDA toolkit's, else the one in PyTorch's NCCL wheel;
# and keep NVLink multicast off (the GPU machines' rule: never cuMulticastCreate).
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  for _d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
            "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
    if [[ -n $_d && -e $_d/libnccl.so.2 ]]; then
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$_d"
      echo "NCCL: $_d/libnccl.so.2" >&2
      break
    fi
  done
  unset _d
fi
export NCCL_NVLS_ENABLE=0
