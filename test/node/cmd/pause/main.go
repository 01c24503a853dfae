// Command pause is the sandbox ("pause") container of the node test: it holds
// a pod's namespaces and does nothing until it is told to stop.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the pod, adopt and reap orphans so that none stays a zombie.
	reap := make(chan os.Signal, 1)
	signal.Notify(reap, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-reap:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
