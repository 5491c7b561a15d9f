# Sourced by scripts/fuzz.sh and scripts/fuzz-device.sh: the libFuzzer
# targets (build/fuzz/fuzz_NAME) and the input size each is fuzzed at.
# Small inputs keep every target in the thousands of executions per second.
FUZZ_TARGETS=(config chat safetensors tokenizer_encode run_dir tokenizer_load experiment)
declare -A FUZZ_MAX_LEN=([config]=4096 [chat]=2048 [safetensors]=8192 [tokenizer_encode]=1024
                         [run_dir]=32768 [tokenizer_load]=16384 [experiment]=4096)
