# shellcheck shell=bash disable=SC2034  # sourced; a plan uses only the values its checks need
# clusterkit: which torch and NCCL the ranks of golden load, read where they run, before
# the launcher starts.  The first task of each node logs one line; every task keeps only the
# flight-recorder names its torch reads.  Sourced by the launch step (nccl.env has the reasons).
ck_probe_full=0
[ "${SLURM_LOCALID:-0}" = 0 ] && ck_probe_full=1
ck_torch="" ck_nccl="" ck_nccl_from="" ck_nccl_why=""
# One Python per node, never one per rank: a Python's start opens hundreds of files where it is
# installed (a venv on shared storage: the metadata server), so with several tasks on a node the
# first runs it and leaves its four lines in a folder of its own under /tmp, and the others read
# them there (waiting at most 60 s, else they keep both flight-recorder names, as for an unknown torch).
ck_probe_dir=""
if [ "${SLURM_STEP_NUM_TASKS:-1}" -gt "${SLURM_STEP_NUM_NODES:-1}" ] 2>/dev/null; then
  ck_probe_dir="${TMPDIR:-/tmp}/ck-probe.$(id -u).${SLURM_JOB_ID:-0}.${SLURM_RESTART_COUNT:-0}.${SLURM_STEP_ID:-0}.$(hostname)"
fi
if [ -n "$ck_probe_dir" ] && [ "$ck_probe_full" = 0 ]; then
  for (( ck_i = 0; ck_i < 600; ck_i++ )); do [ -f "$ck_probe_dir/out" ] && break; sleep 0.1; done
  # the folder must be this user's own (made 0700 by the node's first task), never one planted in /tmp
  if [ -d "$ck_probe_dir" ] && [ ! -L "$ck_probe_dir" ] && [ -O "$ck_probe_dir" ] && [ -f "$ck_probe_dir/out" ]; then
    { IFS= read -r ck_torch; IFS= read -r ck_nccl; IFS= read -r ck_nccl_from; IFS= read -r ck_nccl_why; } < "$ck_probe_dir/out"
  fi
else
{ IFS= read -r ck_torch; IFS= read -r ck_nccl; IFS= read -r ck_nccl_from; IFS= read -r ck_nccl_why; } < <(
  CK_PROBE_FULL=$ck_probe_full python3 - 2>/dev/null <<'CK_PROBE_PY' || printf '%s\n' - - - 'no python3 on PATH where the ranks run'
# Prints four lines: torch version, NCCL version, which library, why not detected ('-' = none).
# Cheap (no torch import): torch's version from its metadata; the first task of a node loads the
# libnccl.so.2 a CUDA torch loads (its wheel's nvidia-nccl, first on libtorch_cuda.so's RPATH, else
# the loader's: an image's or module's) and asks it, ncclGetVersion.
import ctypes, importlib.metadata as md, importlib.util, os, re
def clean(text):
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(text))[:300] or "-"
def loaded_nccl():
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split(None, 5)[-1].strip()
                if "/libnccl.so" in path:
                    return path
    except OSError:
        pass
    return "libnccl.so.2"
def nccl_version(name):
    code = ctypes.c_int(0)
    if ctypes.CDLL(name).ncclGetVersion(ctypes.byref(code)) != 0:
        raise OSError("ncclGetVersion returned an error")
    c = code.value   # NCCL_VERSION_CODE: X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z from 2.9
    return "%d.%d.%d" % ((c // 1000, c % 1000 // 100, c % 100) if c < 20900 else (c // 10000, c % 10000 // 100, c % 100))
torch_v = nccl = where = why = ""
try:
    torch_v = md.version("torch")
except Exception:
    pass
if os.environ.get("CK_PROBE_FULL") == "1":
    spec = importlib.util.find_spec("torch") if torch_v else None
    tdir = spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else ""
    cuda = bool(tdir) and os.path.exists(os.path.join(tdir, "lib", "libtorch_cuda.so"))
    wheel = os.path.join(os.path.dirname(tdir), "nvidia", "nccl", "lib", "libnccl.so.2") if tdir else ""
    try:
        if cuda and os.path.exists(wheel):
            nccl, where = nccl_version(wheel), f"torch {torch_v} wheel's nvidia-nccl, {os.path.realpath(wheel)}"
        else:
            nccl = nccl_version("libnccl.so.2")
            where = loaded_nccl() + (f", for torch {torch_v}" if cuda else f"; torch {torch_v} here has no CUDA"
                                     if tdir else "; no torch in this Python")
    except (OSError, AttributeError) as exc:
        have = (f"torch {torch_v} has CUDA but" if cuda else f"torch {torch_v} has no CUDA (a CPU build) and"
                if tdir else "no torch in this Python and")
        why = f"{have} no libnccl.so.2 on the loader path ({exc})"
print(clean(torch_v), clean(nccl), clean(where), clean(why), sep="\n")
CK_PROBE_PY
)
  if [ -n "$ck_probe_dir" ]; then
    # the folders of this job's earlier steps on this node go (a relaunch's, a restart's); then this step's
    rm -rf -- "${TMPDIR:-/tmp}/ck-probe.$(id -u).${SLURM_JOB_ID:-0}."* 2>/dev/null
    if mkdir -m 0700 -- "$ck_probe_dir" 2>/dev/null; then
      printf '%s\n' "$ck_torch" "$ck_nccl" "$ck_nccl_from" "$ck_nccl_why" > "$ck_probe_dir/out.tmp" &&
        mv -f -- "$ck_probe_dir/out.tmp" "$ck_probe_dir/out"
    fi
  fi
fi
[[ $ck_torch =~ ^[0-9]+\.[0-9]+ ]] || ck_torch=""
[[ $ck_nccl =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || ck_nccl=""
ck_nccl_code=0
[ -n "$ck_nccl" ] && ck_nccl_code=$(( BASH_REMATCH[1] * 10000 + BASH_REMATCH[2] * 100 + BASH_REMATCH[3] ))
if [ "$ck_probe_full" = 1 ]; then
  if [ -n "$ck_nccl" ]; then
    echo "clusterkit: NCCL $ck_nccl ($ck_nccl_from) on $(hostname)" >&2
  else
    echo "clusterkit: NCCL not detected on $(hostname): ${ck_nccl_why#-}" >&2
  fi
fi
# The flight recorder's names: torch 2.7+ reads TORCH_FR_* (and warns, once per rank, about the
# old TORCH_NCCL_* names), older torch only TORCH_NCCL_*.  Unknown torch: both stay.
ck_fr_drop=()
if [[ $ck_torch =~ ^([0-9]+)\.([0-9]+) ]]; then
  if (( BASH_REMATCH[1] > 2 || (BASH_REMATCH[1] == 2 && BASH_REMATCH[2] >= 7) )); then
    ck_fr_drop=(TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_NCCL_DEBUG_INFO_TEMP_FILE TORCH_NCCL_DEBUG_INFO_PIPE_FILE)
  else
    ck_fr_drop=(TORCH_FR_BUFFER_SIZE TORCH_FR_DUMP_TEMP_FILE TORCH_FR_DEBUG_INFO_PIPE_FILE)
  fi
fi
for ck_name in "${ck_fr_drop[@]}"; do unset "$ck_name"; done
:
