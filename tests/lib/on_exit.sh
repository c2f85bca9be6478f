# on_exit.sh: on_exit COMMAND, the one way a test script removes its scratch files when it ends.
# Sourced by tests/lib/suite.sh, and by the scripts that do not use it.
#
#   on_exit 'rm -rf "$work"'    COMMAND (a string, as trap takes it) runs when this shell exits
#
# Never in a child of this shell: once an EXIT trap is set, bash catches the terminating signals, and
# a child it forked runs its parent's traps if a signal reaches it between the fork and its exec (a
# test that signals a program it has just started). Such a child must not remove its parent's files.
# The process is told by the kernel (/proc/self/stat, read without a fork): bash's own $BASHPID can
# still hold the parent's number at that moment.
on_exit() {
  trap "read -r on_exit_pid _ < /proc/self/stat; [ \"\$on_exit_pid\" != $$ ] || { $1; }" EXIT
}
