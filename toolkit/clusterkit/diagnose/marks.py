"""Lines that are no failure but say something: clusterkit's own notices, torch's normal-exit
warning (a clean end), a pasted shell prompt (whose host the output below comes from)."""

from __future__ import annotations

import re

# clusterkit's own lines are notices (which NCCL a node loads, signals, chain decisions), never a
# failure, except these: a module or setup step that failed, a launcher that exited non-zero
_OWN = re.compile(r"(?:^|: )clusterkit: ")
_OWN_FAILURE = re.compile(r"clusterkit: (?:module load .* failed|.*setup step \d+ failed|cannot create )")
# torch's warnings at the normal end of a process that used a process group: the program ran to its end
CLEAN_EXIT = (r"destroy_process_group\(\) was not called before program exit"
              r"|process group has NOT been destroyed before it is being destructed"
              r"|must call destroy_process_group\(\) before process exit")
_CLEAN_EXIT = re.compile(CLEAN_EXIT)
# a shell prompt pasted with its output ("[root@bh174 chenyang]# nvidia-smi", "(venv) root@node1:~# dmesg")
PROMPT = r"^(?:\(\S+\) )?\[?[A-Za-z_][\w.-]*@([A-Za-z0-9][\w.-]*)(?:[: ][^\]#$\n]*)?\]?[#$] "
_PROMPT = re.compile(PROMPT)


def is_clean_exit(line: str) -> bool:
    """torch's warning at the normal end of a process (positive evidence that it ran to its end)."""
    return _CLEAN_EXIT.search(line) is not None


_REMOTE = re.compile(r"(?:\S*/)?(?:srun|sbatch|salloc|mpirun|mpiexec|ssh|pdsh|clush|torchrun|deepspeed|horovodrun)\b")


def prompt_host(line: str) -> str | None:
    """The host a pasted shell prompt names, where the output below it comes from; "" for a
    prompt whose command runs elsewhere (srun, mpirun, ssh, ...); None for a line that is no prompt."""
    m = _PROMPT.match(line)
    if not m:
        return None
    return "" if _REMOTE.match(line[m.end():]) else m.group(1)


def is_own_notice(message: str) -> bool:
    """clusterkit's own informational line (never failure evidence)."""
    return _OWN.search(message) is not None and _OWN_FAILURE.search(message) is None
