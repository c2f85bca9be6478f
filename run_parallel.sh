#!/usr/bin/env bash
# run_parallel.sh: one facegen job over RANKS ranks per node (one per GPU) on every node it is given,
# through OpenMPI. Writes the same PREFIX.txt and PREFIX.bmp as the single-process program.
#
#   ./run_parallel.sh --input inputs/input1.txt --output outputs/output1 --ranks-per-node 4 \
#                     [--model PATH] [--hosts a,b | --hosts FILE] [--program PATH] [-- facegen flags]
#   (--random N [--seed S] or --interpolate K [--seed S] instead of --input: drawn latents; --seeds LIST:
#   one image per seed; --truncation T with any of them)
#   make run_parallel INPUT=input1 OUTPUT=output1 NGPUS=4 [MODEL=path] [HOSTS=...] [ARGS='--verbose']
#   ./run_parallel.sh --serve --ranks-per-node 4 [--model PATH] [--hosts a,b] [-- facegen serve flags]
#   (the HTTP service over every rank: rank 0 listens, every rank generates; docs/service.md)
#
# Where the ranks run:
#   inside a Slurm allocation (SLURM_JOB_ID set): on all of the allocation's nodes, started by
#     srun --mpi=pmix; with LAUNCHER=mpirun, or when this Slurm has no PMIx, by mpirun on Slurm's
#     node list (mpirun then starts its daemons through Slurm);
#   otherwise --hosts a,b,c (host names) or --hosts FILE (a hostfile: one host per line, # comments):
#     mpirun on those hosts, over ssh, with the same paths on every host;
#   otherwise this machine alone.
# The program: facegen beside this script (as make install puts them: PREFIX/bin/facegen and
# PREFIX/bin/facegen-run-parallel), else build/facegen beside it (the source tree); --program PATH
# picks another. Without --model the program uses its shipped model.
# It prints the command before running it, and reports, finishes or removes nothing until every
# process of the job on this host has ended (those that outlive the launcher get 2 s, then SIGTERM,
# then SIGKILL FACEGEN_STOP_SECONDS later); a SIGKILL to this script is seen by a guard process of
# its own, which stops the job and cleans up. When the job fails it finishes a commit of the outputs
# that the launcher cut short (facegen --finish-commit: the whole new set in place), removes the
# temporary files that a killed rank could not (PREFIX.<ext>.tmp-TOKEN-XXXXXX, TOKEN this job's own,
# and only this user's own files and folders, never a link: another run's temporaries of the same
# prefix, or what another user put in a shared folder under such a name, stay), says whether the outputs were replaced and exits
# with the job's status; SIGINT or SIGTERM to this script stops the job the same way and exits 130
# or 143. With --serve, SIGINT or SIGTERM stops the service as it stops in one process (no new
# connection, every accepted request answered, exit 0); a second one ends the job at once.
set -euo pipefail
# A closed standard descriptor (a daemon, `cmd >&-`) gets /dev/null, as facegen gives itself: a write
# to a closed stdout would end this script (set -e) before the job, without a word.
[ -e /proc/self/fd/0 ] || exec 0< /dev/null
[ -e /proc/self/fd/1 ] || exec 1> /dev/null
[ -e /proc/self/fd/2 ] || exec 2> /dev/null

# The stack, first: bash itself crashes in this script with a soft limit of 16 KiB, mpirun and its
# daemons with 128 KiB or less, and facegen needs 1 MiB (common/stack_room.hpp: kStackNeededBytes,
# kStackWantedBytes). As facegen does for itself, the soft limit is raised toward 8 MiB for the whole
# job, or the job is refused in one line when the hard limit leaves less than facegen needs.
stack_room() {
  local soft hard need=1024 want=8192
  soft=$(ulimit -S -s) hard=$(ulimit -H -s)
  if [ "$hard" != unlimited ] && [ "$hard" -lt $need ]; then
    echo "run_parallel: the stack size limit (ulimit -s) is $soft KiB and may not be raised past $hard KiB, but" \
         "facegen needs $need KiB: raise it (ulimit -s $want)" >&2
    exit 1
  fi
  if [ "$soft" != unlimited ] && [ "$soft" -lt $want ]; then
    if [ "$hard" = unlimited ] || [ "$hard" -ge $want ]; then ulimit -S -s $want; else ulimit -S -s "$hard"; fi
  fi
}
stack_room
# The address space: mpirun itself maps about 270 MiB for a job of two ranks, and under less it fails
# ("No network interfaces were found"), dies of SIGSEGV in its PMIx server, or hangs for good once a
# rank has died (seen at ulimit -v 150000). Below 512 MiB the job is refused in one line. Above it, a
# rank that runs out says so itself (exit 3).
address_space_room() {
  local limit least=524288
  limit=$(ulimit -v)
  if [ "$limit" != unlimited ] && [ "$limit" -lt $least ]; then
    echo "run_parallel: the address-space limit (ulimit -v) is $limit KiB, too little for mpirun and its ranks" \
         "(at least $least KiB, 512 MiB): raise it (ulimit -v unlimited)" >&2
    exit 1
  fi
}
address_space_room

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
program=$here/build/facegen
[ -x "$here/facegen" ] && [ ! -d "$here/facegen" ] && program=$here/facegen
model=
serve=0
latent_args=()
output=
ranks_per_node=
hosts=${HOSTS:-}
launcher=${LAUNCHER:-}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
}
die() {
  echo "run_parallel: $*" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --input|--random|--interpolate|--seed|--seeds|--truncation) latent_args+=("$1" "${2:?}"); shift 2 ;;
    --output) output=${2:?}; shift 2 ;;
    --serve) serve=1; shift ;;
    --ranks-per-node) ranks_per_node=${2:?}; shift 2 ;;
    --model) model=${2:?}; shift 2 ;;
    --hosts) hosts=${2:?}; shift 2 ;;
    --program) program=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) die "unknown argument '$1': facegen's own flags go after --, as in ./run_parallel.sh --random 8 --output o --ranks-per-node 2 -- $1 ... (see --help)" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
if [ "$serve" = 1 ]; then
  [ ${#latent_args[@]} -eq 0 ] && [ -z "$output" ] || die "--serve takes no latents and no --output: clients ask for images"
  [ -n "$ranks_per_node" ] || die "--ranks-per-node is required (see --help)"
else
  [ ${#latent_args[@]} -gt 0 ] && [ -n "$output" ] && [ -n "$ranks_per_node" ] ||
    die "--input (or --random, --interpolate, --seeds), --output and --ranks-per-node are required (see --help)"
fi
[[ $ranks_per_node =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-node must be a positive integer, got '$ranks_per_node'"
[ -x "$program" ] || die "$program is missing: run make first"
if [ "$serve" = 1 ]; then
  facegen_args=(serve ${model:+--model "$model"} "$@")
else
  facegen_args=(
    ${model:+--model "$model"}
    "${latent_args[@]}"
    --output "$output"
    "$@"
  )
fi

# Hosts outside Slurm: a comma-separated list, or a hostfile (first word of each line).
host_list=()
if [ -n "$hosts" ]; then
  if [ -f "$hosts" ]; then
    mapfile -t host_list < <(sed 's/#.*//' "$hosts" | awk 'NF { print $1 }' | awk '!seen[$0]++')
  else
    IFS=, read -r -a host_list <<< "$hosts"
  fi
  [ ${#host_list[@]} -gt 0 ] || die "--hosts '$hosts' names no host"
fi

# The ranks' stderr is a pipe; where ours is a terminal, rank 0 draws its progress bar there
# (FACEGEN_PROGRESS_TTY=HOST:PATH, used only by a rank on this host).
if [ -t 2 ] && tty_path=$(readlink /proc/$$/fd/2) && [ -c "$tty_path" ]; then
  export FACEGEN_PROGRESS_TTY="$(hostname):$tty_path"
fi

# Every temporary name of this job's ranks carries this token (PREFIX.txt.tmp-TOKEN-XXXXXX): after a
# failure the script removes those, never another run's temporaries of the same prefix. It is given
# to the launch command alone (FACEGEN_TEMP_TAG, which mpirun hands on with -x, srun with the rest of
# its environment), so that it also marks every process of the job (job_processes, below).
job_token="rp$$h$(hostname | cksum | cut -c1-6)r$RANDOM"

mpirun_common() {  # the mpirun flags every mpirun launch uses
  cmd+=(-x FACEGEN_TEMP_TAG)
  cmd+=(--bind-to none)        # a CPU rank runs one thread per core it owns; GPU ranks need no pinning
  cmd+=(--oversubscribe)       # GPU ranks mostly wait on their GPU: more ranks than cores is fine
  if [ -n "${FACEGEN_PROGRESS_TTY:-}" ]; then
    cmd+=(-x FACEGEN_PROGRESS_TTY) # rank 0's progress bar (above)
  fi
  if [ "$(id -u)" = 0 ]; then
    cmd+=(--allow-run-as-root) # containers and CI run as root
  fi
}
# The flags of an mpirun whose daemons run on other nodes: its control connections to them probe
# an idle peer after 2 s, every second, 3 times, so that a node whose link or host went down ends
# the job within seconds, on both sides, instead of after TCP's retransmission timeout (minutes).
mpirun_remote() {
  cmd+=(--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3)
}

cmd=()
if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "$hosts" ]; then
  nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
  ranks=$((nodes * ranks_per_node))
  if [ -z "$launcher" ]; then
    launcher=mpirun
    if command -v srun > /dev/null && srun --mpi=list 2>&1 | grep -q pmix; then launcher=srun; fi
  fi
  where="$nodes node(s) of Slurm job $SLURM_JOB_ID ($SLURM_JOB_NODELIST)"
  if [ "$launcher" = srun ]; then
    cmd+=(srun)
    cmd+=(--mpi=pmix)                         # the ranks find each other through Slurm's PMIx
    cmd+=(--nodes="$nodes")
    cmd+=(--ntasks="$ranks")
    cmd+=(--ntasks-per-node="$ranks_per_node")
    cmd+=(--kill-on-bad-exit=1)               # a rank that dies takes the job down at once
    cmd+=(--job-name="facegen-$job_token")
    if [ "${SLURM_GPUS_ON_NODE:-0}" -ge "$ranks_per_node" ] 2>/dev/null && [ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ]; then
      cmd+=(--gpus-per-task=1)                # each rank sees its own GPU as device 0
    fi
  else
    mapfile -t host_list < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    node_hosts=$(printf "%s:$ranks_per_node\n" "${host_list[@]}" | paste -sd,)
    cmd+=(mpirun)
    cmd+=(-np "$ranks")
    cmd+=(--host "$node_hosts")
    cmd+=(--map-by "ppr:$ranks_per_node:node")
    mpirun_common
    mpirun_remote
  fi
elif [ ${#host_list[@]} -gt 0 ]; then
  nodes=${#host_list[@]}
  ranks=$((nodes * ranks_per_node))
  where="$nodes host(s): ${host_list[*]}"
  host_slots=$(printf "%s:$ranks_per_node\n" "${host_list[@]}" | paste -sd,)
  cmd+=(mpirun)
  cmd+=(-np "$ranks")
  cmd+=(--host "$host_slots")
  cmd+=(--map-by "ppr:$ranks_per_node:node")
  if [ -n "${LD_LIBRARY_PATH:-}" ]; then
    cmd+=(-x LD_LIBRARY_PATH)                 # ranks on other hosts see this environment
  fi
  mpirun_common
  mpirun_remote
else
  nodes=1
  ranks=$ranks_per_node
  where="this machine ($(hostname -s))"
  cmd+=(mpirun)
  cmd+=(-np "$ranks")
  mpirun_common
fi
command -v "${cmd[0]}" > /dev/null || die "${cmd[0]} not found: install OpenMPI (make deps)"

# mpirun's reports of a failed job, boiled down to one line each: a rank that failed has already
# said why in its own line ("facegen: error on rank R (host H): ..."), so the "job aborted" banners
# go; a rank that died without a word (a signal, a crash) gets a line naming rank and host, and so
# does a node that mpirun lost contact with (its first rank: mpirun places ranks_per_node ranks on
# each host in the order of the host list). OpenMPI's own complaints about files it could not remove
# go. Anything else passes through unchanged.
summarize_mpirun_errors() {
  local hosts_in_order="${host_list[*]:-$(hostname -s)}"
  awk -v hosts_in_order="$hosts_in_order" -v per_node="$ranks_per_node" '
    BEGIN { host_count = split(hosts_in_order, host_of_index, " ") }
    function first_rank_on(host,   i) {
      for (i = 1; i <= host_count; i++) if (host_of_index[i] == host) return (i - 1) * per_node
      return "?"
    }
    function host_of_rank(rank,   i) {
      i = int(rank / per_node) + 1
      return (i <= host_count ? host_of_index[i] : "unknown")
    }
    function flush_block(   text, m) {
      text = block; block = ""; in_block = 0
      if (text ~ /Primary job +terminated normally/) return
      if (match(text, /process rank [0-9]+ with PID [0-9]+ on node [^ ]+ exited on signal [0-9]+ \([^)]*\)/)) {
        m = substr(text, RSTART, RLENGTH)
        split(m, w, " ")
        name = m; sub(/.*exited on signal [0-9]+ /, "", name)  # "(Segmentation fault)", spaces and all
        printf "facegen: error on rank %s (host %s): the process died of signal %s %s\n", w[3], w[9], w[13], name
        said = 1; fflush(); return
      }
      if (text ~ /exited with non-zero status/ && match(text, /Process name: \[\[[0-9]+,[0-9]+\],[0-9]+\]/)) {
        if (said) return
        m = substr(text, RSTART, RLENGTH); gsub(/.*,|\]/, "", m)
        code = text; sub(/.*Exit code: */, "", code); sub(/[^0-9].*/, "", code)
        printf "facegen: error on rank %s (host %s): the process ended with status %s without a message\n", m, host_of_rank(m), code
        said = 1; fflush(); return
      }
      if (text ~ /lost communication with a remote daemon/ && match(text, /Remote daemon: *\[\[[0-9]+,[0-9]+\],[0-9]+\] on node [^ \n]+/)) {
        m = substr(text, RSTART, RLENGTH); sub(/.* on node /, "", m)
        printf "facegen: error on rank %s (host %s): mpirun lost contact with the node (its network link, host or daemon went down); the job was stopped\n", first_rank_on(m), m
        said = 1; fflush(); return
      }
      printf "%s", text; fflush()
    }
    /^--------------------+$/ { if (in_block) { block = block $0 "\n"; flush_block() } else { in_block = 1; block = $0 "\n" } next }
    in_block { block = block $0 "\n"; next }
    /^facegen: (error|fault)/ { said = 1 }  # a rank said why (before MPI started: "facegen: error: ...")
    # OpenMPI failing to remove its shared-file-pointer files beside an output whose folder was moved
    # or replaced mid-run: the rank has said so in its own words.
    /^\[[^]]*\] mca_fs_base_file_delete: Could not remove file / { next }
    # OpenMPI counting the help texts it held back (one rank out of memory, say) after a rank said why.
    said && /^\[[^]]*\] [0-9]+ more process(es)? (has|have) sent help message / { next }
    said && /^\[[^]]*\] Set MCA parameter "orte_base_help_aggregate" to 0/ { next }
    { print; fflush() }
    END { if (in_block) printf "%s", block }
  '
}

cmd+=("$program" "${facegen_args[@]}")

# --- the job's processes on this host ---------------------------------------------------------------
# Only the launch command gets the job's token in its environment (FACEGEN_TEMP_TAG=TOKEN, below),
# and everything it starts inherits it: on this host mpirun or srun, the ranks (mpirun's, or
# slurmstepd's under srun), OpenMPI's daemons, the ssh clients that reach other nodes. They are found
# by it in /proc, whatever their parent, process group or session is by then: OpenMPI gives each
# rank a process group of its own, and a rank whose mpirun died is a child of init. This script's own
# helpers never carry it. A user may read only the environment of their own processes: those are all
# a job of theirs has. "This host" is this script's UTS namespace (its host name): where nodes share
# one kernel (containers, tests/lib/virtual_cluster.sh), another node's processes are not this host's.
job_processes() {
  local pid
  for pid in $(grep -lsxzF "FACEGEN_TEMP_TAG=$job_token" /proc/[0-9]*/environ 2> /dev/null | cut -d/ -f3); do
    [ "/proc/$pid/ns/uts" -ef /proc/self/ns/uts ] && echo "$pid"
  done
  return 0
}
# process_names PID...: "812 (facegen), 815 (ssh)".
process_names() {
  local pid names=()
  for pid in "$@"; do names+=("$pid ($(cat "/proc/$pid/comm" 2> /dev/null || echo ended))"); done
  local IFS=,
  echo "${names[*]}" | sed 's/,/, /g'
}
# job_step: under srun, the Slurm step of the job (JOB.STEP, named facegen-TOKEN) while Slurm still
# lists it: its ranks on other nodes, which this host cannot see, are still running or ending.
job_step() {
  [ "${cmd[0]}" = srun ] && [ "$step_watched" = yes ] || return 0
  squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2> /dev/null | awk -v name="facegen-$job_token" '$2 == name { print $1; exit }'
}
step_watched=no
# wait_job_processes SECONDS: until no process of the job is left on this host (nor its Slurm step),
# SECONDS at most; false when some are still there.
wait_job_processes() {
  local fifths=$(($1 * 5))
  while [ -n "$(job_processes)" ] || [ -n "$(job_step)" ]; do
    [ $fifths -gt 0 ] || return 1
    sleep 0.2
    fifths=$((fifths - 1))
  done
}
# end_job_processes: returns once no process of the job is left on this host. Where the launcher
# ended (or was killed) before all of them, those still there get settle_seconds (a service's ranks
# 2 x stop_seconds) to end by themselves (a rank whose launcher died stops within a second: mpi/launcher_watch.hpp; OpenMPI's
# daemon on another node kills its ranks when it loses mpirun, and the ssh client that reached it,
# one of the job's processes here, ends after it), then SIGTERM (what mpirun sends: a rank removes
# its temporaries and lock), stop_seconds more, then SIGKILL. Under srun, whose ranks run under
# slurmstepd on every node, a failed srun's step is waited for too and cancelled with it (scancel
# JOB.STEP, which reaches every node). One line says what it took. False when some did not end even
# then (stuck in the kernel, on a dead file server): their files must stay as they are.
end_job_processes() {
  local launcher_status=$1 first step
  [ "$launcher_status" = 0 ] || step_watched=yes
  first=$(job_processes)
  step=$(job_step)
  [ -z "$first$step" ] && return 0
  local what="${cmd[0]} ended before its job"
  [ -z "$first" ] || what="$what: on this host $(echo $first | wc -w) process(es), $(process_names $first)"
  [ -z "$step" ] || what="$what${first:+;} its Slurm step $step"
  # A service's ranks answer the requests they took before they stop (under srun scancel signals
  # them itself, and srun may end first): they get stop_seconds twice over, as Slurm's KillWait gives.
  local settle=$settle_seconds
  [ "$serve" = 0 ] || settle=$((stop_seconds * 2))
  if wait_job_processes "$settle"; then
    # A step that Slurm still listed for a moment after srun ended (COMPLETING) is no news.
    [ -z "$first" ] || echo "run_parallel: $what; they ended by themselves" >&2
    return 0
  fi
  step=$(job_step)
  [ -z "$step" ] || scancel --quiet "$step" 2> /dev/null
  kill -TERM $(job_processes) 2> /dev/null
  if wait_job_processes "$stop_seconds"; then
    echo "run_parallel: $what; stopped with SIGTERM${step:+ (scancel $step)}" >&2
    return 0
  fi
  kill -KILL $(job_processes) 2> /dev/null
  if wait_job_processes 5; then
    echo "run_parallel: $what; killed (SIGKILL) $stop_seconds s after SIGTERM" >&2
    return 0
  fi
  first=$(job_processes)
  step=$(job_step)
  echo "run_parallel: $what; ${first:+$(process_names $first) }${step:+Slurm step $step }did not end even after" \
       "SIGKILL: the job's files are left as they are" >&2
  return 1
}

# --- after the job: its commit finished, its leftovers removed, one line ---------------------------
# prefix_lock_name STEM: the lock file's name of a prefix whose last name is STEM: ".facegen-lock-"
# and FNV-1a (64 bits) of its bytes in 16 hex digits, as commit/prefix_lock.cpp names it.
prefix_lock_name() {
  local LC_ALL=C stem=$1 hash=$((0xcbf29ce484222325)) i byte
  for ((i = 0; i < ${#stem}; i++)); do
    printf -v byte '%d' "'${stem:i:1}"
    hash=$(( (hash ^ (byte & 255)) * 0x100000001b3 ))
  done
  printf '.facegen-lock-%016x' "$hash"
}

# Only this user's own journals and leftovers are acted on (this_users), never a link: in a shared
# folder such as /tmp another user can put anything under a name with the job's token (which its
# temporaries show while the job runs); what is not is named in one line and left.
uid=$(id -u)
# A test of the shell's own (-O: owned by this user's effective id), no process: a job whose killed
# ranks left ten thousand temporaries (a file per image) is cleaned up in a moment, not a minute.
this_users() {  # this_users PATH: a regular file or folder of this user's, not a link
  ! [ -L "$1" ] && { [ -f "$1" ] || [ -d "$1" ]; } && [ -O "$1" ]
}

# finish_job WHAT: once every process of the job has ended. Rank 0 journals the commit of the
# outputs (DIR/.facegen-commit-TOKEN-XXXXXX, marked done when it finished). A journal still under way
# means rank 0 was killed mid-commit (mpirun sends SIGKILL a second after the SIGTERM it hands on):
# facegen --finish-commit completes it, before the temporaries (the new outputs it renames into
# place) could be removed below. After a failure, the temporaries and the lock that a killed rank
# could not remove go. WHAT: how the job ended, for the last line ("" from $status and
# $interrupted). Sets $status.
finish_job() {
  local what=$1 foreign=() outdir outputs_replaced=no journals journal finish_status finish_line
  outdir=$(dirname -- "$output")
  mapfile -t journals < <(compgen -G "$outdir/.facegen-commit-$job_token-??????" || true)
  for journal in ${journals[@]+"${journals[@]}"}; do
    if ! this_users "$journal"; then
      foreign+=("$journal")
      continue
    fi
    finish_status=0
    finish_line=$("$program" --finish-commit "$journal" 2>&1) || finish_status=$?
    case $finish_status in
      0) outputs_replaced=yes
         [[ $finish_line == *"had finished"* ]] || echo "run_parallel: ${finish_line#facegen: }" >&2 ;;
      4) echo "run_parallel: ${finish_line#facegen: }" >&2 ;;
      *) outputs_replaced=unknown
         echo "run_parallel: ${finish_line#facegen: }" >&2
         [ $status -ne 0 ] || status=1 ;;
    esac
  done

  if [ $status -ne 0 ]; then
    # A rank killed by a signal or by the launcher cannot remove its temporary files and folders.
    # MPI-IO adds files of its own beside each: TEMP.data.RANK, TEMP.metadata.RANK (the shared file
    # pointer facegen asks OpenMPI for), a lock file across nodes (TEMP-JOB-PID.lock).
    # A name too long for NAME_MAX with its suffix is cut before ".tmp-": the token finds it too.
    local leftovers leftover owned=() lock
    mapfile -t leftovers < <({ compgen -G "$output*.tmp-$job_token-??????" || true
                               compgen -G "$outdir/*.tmp-$job_token-??????" || true
                               compgen -G "$output*.tmp-$job_token-??????-*.lock" || true
                               compgen -G "$outdir/*.tmp-$job_token-??????.*" || true; } | sort -u)
    # The prefix's lock (DIR/.facegen-lock-HASH, commit/prefix_lock.cpp) that a killed rank 0 left:
    # removed only while this script holds it itself (no run does), and only this user's regular file.
    lock="$outdir/$(prefix_lock_name "$(basename -- "$output")")"
    if [ -f "$lock" ] && [ ! -L "$lock" ] && this_users "$lock" && command -v flock > /dev/null; then
      flock --nonblock "$lock" rm -f -- "$lock" 2> /dev/null || true
    fi
    for leftover in ${leftovers[@]+"${leftovers[@]}"}; do
      if this_users "$leftover"; then owned+=("$leftover"); else foreign+=("$leftover"); fi
    done
    if [ ${#owned[@]} -gt 0 ]; then
      if rm -rf -- "${owned[@]}"; then
        echo "run_parallel: removed temporary files: ${owned[*]}" >&2
      else
        echo "run_parallel: could not remove all of the temporary files ${owned[*]}" >&2
      fi
    fi
  fi
  if [ ${#foreign[@]} -gt 0 ]; then
    echo "run_parallel: left alone, not this user's own files or folders: ${foreign[*]}" >&2
  fi
  if [ $status -ne 0 ]; then
    if [ -z "$what" ]; then
      case $interrupted in
        130) what="interrupted (SIGINT); the job was stopped" ;;
        143) what="terminated (SIGTERM); the job was stopped" ;;
        *) what="the job failed (exit status $status)" ;;
      esac
    fi
    case $outputs_replaced in
      no) if [[ " ${facegen_args[*]} " == *" --resume "* ]]; then
            echo "run_parallel: $what; the files it finished are in place, recorded in $output.facegen-resume" \
                 "(--resume: a rerun of the same job makes the rest)" >&2
          else
            echo "run_parallel: $what; no output was written" >&2
          fi ;;
      yes) echo "run_parallel: $what after its outputs were written: the new outputs are in place" >&2 ;;
      *) echo "run_parallel: $what while its outputs were put in place, and that could not be finished (see above)" >&2 ;;
    esac
  fi
}

# remove_session_directory: mpirun keeps its session directory in TMPDIR (or /tmp) as
# ompi.HOST.UID/pid.PID and removes it as it ends; one killed by a signal cannot. Removed here once
# every process of the job has ended (the ranks' own directories are inside it), only this user's
# own, never a link; the folder above it goes when it is left empty, as mpirun leaves it.
remove_session_directory() {
  [ "${cmd[0]}" = mpirun ] && [ -n "${launcher_pid:-}" ] && [ "$status" -gt 128 ] || return 0
  local base=${TMPDIR:-/tmp} host dir
  for host in "$(hostname)" "$(hostname -s)"; do
    dir=$base/ompi.$host.$uid/pid.$launcher_pid
    this_users "$dir" && [ -d "$dir" ] || continue
    rm -rf -- "$dir" 2> /dev/null || true
    rmdir -- "$base/ompi.$host.$uid" 2> /dev/null || true
  done
  return 0
}

# --- the guard: the job stops when this script is killed ---------------------------------------------
# SIGKILL to this script runs no trap of its: mpirun would go on, with its ranks, nobody waiting for
# them or cleaning up after them. So a process of this script's own, forked before the job starts,
# outlives it: it reads a pipe whose one writing end this script holds (closed for everything it
# starts), and at this script's own end it reads "done" and leaves. Where the pipe ends without it,
# the script died: the guard stops the job as SIGTERM to the script would (SIGTERM to every process of
# the job on this host, SIGKILL stop_seconds later), then finishes the commit and removes the
# leftovers as the script would have, saying so on the script's stderr. Signals that reach the
# script's process group (a terminal's Ctrl-C) are the script's to handle: the guard ignores them.
guard_job() {
  set +e
  trap '' INT TERM HUP QUIT
  local word= left step
  read -r word || true
  [ "$word" = done ] && exit 0
  step_watched=yes
  step=$(job_step)
  [ -z "$step" ] || scancel --quiet "$step" 2> /dev/null
  left=$(job_processes)
  [ -z "$left" ] || kill -TERM $left 2> /dev/null
  if ! wait_job_processes "$stop_seconds"; then
    kill -KILL $(job_processes) 2> /dev/null
    if ! wait_job_processes 5; then
      echo "run_parallel: the script (pid $$) was killed; $(process_names $(job_processes)) of its job did not" \
           "end even after SIGKILL: the job's files are left as they are" >&2
      exit 1
    fi
  fi
  [ "$serve" = 1 ] && exit 0
  status=137
  finish_job "the script (pid $$) was killed (SIGKILL); its job was stopped"
  exit 0
}
# leave STATUS: this script's end, every path once the job has started.
leave() {
  trap '' PIPE  # a guard that was killed itself: the word goes nowhere, and the exit status stays
  echo done >&"$guard_fd" 2> /dev/null
  exit "$1"
}

echo "run_parallel: launching $ranks rank(s), $ranks_per_node per node, on $where:"
echo "  ${cmd[*]}"
# The launcher runs as a background job in its own process group (set -m), and this script waits for
# it, so that a signal to this script (Ctrl-C at a terminal, scancel, kill) is caught here, handed on
# to the launcher once (which stops every rank), and the exit status says what stopped the job: 130
# for SIGINT, 143 for SIGTERM, as for the single-process program. Its stdin is /dev/null (the ranks
# read none): a background process group that reads the terminal would be stopped by SIGTTIN.
status=0
interrupted=0
job=
serve_stop=0
on_signal() {  # on_signal STATUS SIGNAL
  [ "$interrupted" -eq 0 ] || return 0
  interrupted=$1
  # The launcher: the job itself, or, where the job is the pipeline into the error summary (below),
  # the process of that pipeline that is not the summary's awk (found by what it is, not by its name,
  # which a wrapper script does not carry).
  local pid= child
  if [ "$summarized" = 1 ]; then
    for child in $(pgrep -P "$job" 2> /dev/null); do
      [ "$(cat "/proc/$child/comm" 2> /dev/null)" = awk ] || { pid=$child; break; }
    done
  fi
  local signal=$2
  # The service stops by itself on SIGUSR2, which mpirun forwards to every rank; on SIGTERM or SIGINT
  # mpirun would kill the ranks a few seconds later, requests in flight or not. A second signal
  # goes through as it is.
  if [ "$serve" = 1 ] && [ "${cmd[0]}" = mpirun ] && [ "$interrupted" -gt 0 ] && [ "$serve_stop" = 0 ]; then
    signal=USR2
    serve_stop=1
    interrupted=0
  fi
  kill -"$signal" "${pid:-$job}" 2>/dev/null || true
  # A launcher that has not ended stop_seconds after the signal (15, or FACEGEN_STOP_SECONDS; an
  # mpirun deadlocked on its own, as once under ulimit -v 150000) is killed with its ranks, so that
  # the job does stop. Not for the service's graceful stop (SIGUSR2): it first answers what it took.
  [ "$signal" = USR2 ] || [ -n "$stop_watch" ] || start_stop_watch "$signal"
}
stop_seconds=${FACEGEN_STOP_SECONDS:-15}
settle_seconds=2
stop_watch=
# start_stop_watch SIGNAL: in the background, after stop_seconds, SIGKILL for what is left of the
# job's process group, the launcher's children and every process of the job on this host.
start_stop_watch() {
  local launcher_pid=${pid:-$job}
  (
    exec {guard_fd}>&-
    trap '' INT TERM  # a second Ctrl-C reaches this process group too: the deadline stays
    for _ in $(seq $((stop_seconds * 10))); do kill -0 -- -"$job" 2> /dev/null || exit 0; sleep 0.1; done
    echo "run_parallel: the launcher (${cmd[0]}) had not stopped $stop_seconds s after SIG$1: killed, with its ranks" >&2
    pkill -KILL -P "$launcher_pid" 2> /dev/null
    kill -KILL -- -"$job" $(job_processes) 2> /dev/null
  ) &
  stop_watch=$!
}
exec {guard_fd}> >(guard_job)
set +e
set -m
summarized=0
if [ "${cmd[0]}" = mpirun ] && [ "$serve" = 0 ]; then
  summarized=1
  # stderr through the summary, stdout straight through (the service's lines go straight through:
  # the summary's awk reads its input in blocks, and rank 0 says at once where it listens).
  { FACEGEN_TEMP_TAG=$job_token "${cmd[@]}" 2>&1 1>&3 3>&- | summarize_mpirun_errors >&2; exit "${PIPESTATUS[0]}"; } \
    3>&1 {guard_fd}>&- < /dev/null &
else
  FACEGEN_TEMP_TAG=$job_token "${cmd[@]}" {guard_fd}>&- < /dev/null &
fi
job=$!
set +m
# The launcher's pid, for its session directory (below): the job itself, or the process of the
# summary's pipeline that carries the token (awk does not), found as soon as it exists.
launcher_pid=$job
if [ "$summarized" = 1 ]; then
  launcher_pid=
  for _ in $(seq 100); do
    for child in $(pgrep -P "$job" 2> /dev/null); do
      tr '\0' '\n' < "/proc/$child/environ" 2> /dev/null | grep -qxF "FACEGEN_TEMP_TAG=$job_token" && launcher_pid=$child
    done
    [ -n "$launcher_pid" ] || ! kill -0 "$job" 2> /dev/null && break
    sleep 0.01
  done
fi
trap 'on_signal 130 INT' INT
trap 'on_signal 143 TERM' TERM
wait "$job"
status=$?
while kill -0 "$job" 2>/dev/null; do  # a wait that a signal cut short
  wait "$job"
  status=$?
done
trap - INT TERM
# After a stop signal: until every process of the job's group has ended, or the deadline has killed them.
[ -z "$stop_watch" ] || wait "$stop_watch" 2> /dev/null
# Nothing is reported, finished or removed while a process of the job still runs on this host.
ended=yes
end_job_processes "$status" || ended=no
set -e
# A service that stopped cleanly on the signal (every accepted request answered) exits 0, as one
# process of it does.
if [ "$interrupted" -ne 0 ] && ! { [ "$serve" = 1 ] && [ "$status" = 0 ]; }; then status=$interrupted; fi
# The service writes no file: nothing to finish or clean up.
[ "$serve" = 1 ] && leave "$status"
if [ $ended = no ]; then
  [ $status -ne 0 ] || status=1
  leave "$status"
fi
remove_session_directory
finish_job ""
leave "$status"
