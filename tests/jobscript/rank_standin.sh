#!/bin/bash
# Test stand-in for one training rank (tests/jobscript): it does what a training job does with
# signals.  Writes $JS_DIR/ranks/<rank>.pid once running.  On SIGTERM it writes <rank>.term (the
# number of TERMs so far) and saves: at once, or with JS_RANK_SAVE=hold only once $JS_DIR/release
# exists (a slow checkpoint), or with JS_RANK_SAVE=cut until a second TERM cuts the save short.
# Then it writes <rank>.saved and exits 143.  Unsignalled, it exits $JS_RANK_RC once $JS_DIR/finish exists.
me=${SLURM_PROCID:-0}
dir=$JS_DIR/ranks
terms=0
on_term() { terms=$((terms + 1)); printf '%s\n' "$terms" > "$dir/$me.term"; }
trap on_term TERM
mkdir -p "$dir"
printf '%s\n' $$ > "$dir/$me.pid.tmp" && mv "$dir/$me.pid.tmp" "$dir/$me.pid"
for ((i = 0; i < 1200; i++)); do   # bounded: 60 s (no command substitution: a TERM must not cut the loop short)
  if [ "$terms" -gt 0 ]; then
    case "${JS_RANK_SAVE:-now}" in
      hold) [ -e "$JS_DIR/release" ] || { sleep 0.05; continue; } ;;
      cut) if [ "$terms" -lt 2 ]; then sleep 0.05; continue; fi
           printf 'cut short\n' > "$dir/$me.saved"; exit 143 ;;
    esac
    printf 'saved\n' > "$dir/$me.saved"
    exit 143
  fi
  [ -e "$JS_DIR/finish" ] && exit "${JS_RANK_RC:-0}"
  sleep 0.05
done
exit 99
