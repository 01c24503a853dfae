#!/bin/sh
# hack/progress.sh WHAT COMMAND [ARG...] runs COMMAND and, while it runs,
# prints "still WHAT (N min so far)" every minute: a cold build of
# kube-apiserver or of kubelet's code takes minutes on two cores, and go build
# says nothing until it is done. Exits with COMMAND's status.
if [ $# -lt 2 ]; then
	echo "usage: hack/progress.sh WHAT COMMAND [ARG...]" >&2
	exit 2
fi
what=$1
shift
start=$(date +%s)
(
	trap 'kill $s 2>/dev/null; exit 0' TERM
	while :; do
		sleep 60 &
		s=$!
		wait $s
		echo "still $what ($((($(date +%s) - start) / 60)) min so far)"
	done
) &
ticker=$!
trap 'kill $ticker 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$@"
rc=$?
kill $ticker 2>/dev/null
trap - EXIT
exit $rc
