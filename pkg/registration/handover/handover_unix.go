//go:build unix

package handover

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Supported: sockets can be passed between processes (SCM_RIGHTS).
const Supported = true

// sendListener uses the descriptor in place: duplicating it through
// os.File could switch the shared file description to blocking mode.
func sendListener(conn *net.UnixConn, payload []byte, l *net.UnixListener) error {
	raw, err := l.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	if err := raw.Control(func(fd uintptr) {
		_, _, sendErr = conn.WriteMsgUnix(payload, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return sendErr
}

func receiveListener(conn *net.UnixConn) ([]byte, *net.UnixListener, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, nil, err
	}
	for i := range msgs {
		if rights, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, rights...)
		}
	}
	if len(fds) == 0 {
		return nil, nil, errors.New("no socket received")
	}
	for _, fd := range fds[1:] {
		_ = syscall.Close(fd)
	}
	f := os.NewFile(uintptr(fds[0]), "handed-over-registration-socket")
	l, err := net.FileListener(f)
	_ = f.Close()
	if err != nil {
		return nil, nil, err
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		_ = l.Close()
		return nil, nil, errors.New("the socket received is not a Unix listener")
	}
	payload, err := readLine(conn, buf[:n], maxStateBytes)
	if err != nil {
		_ = ul.Close()
		return nil, nil, err
	}
	return payload, ul, nil
}

const maxStateBytes = 64 << 10

// readLine returns the payload started by first, up to its newline; what
// follows is ignored, so that the outcome does not depend on how reads split.
func readLine(conn io.Reader, first []byte, limit int) ([]byte, error) {
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(first), conn), limit+1)
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || err == nil && len(line) > limit+1:
		return nil, fmt.Errorf("handover state longer than %d bytes", limit)
	case err != nil:
		return nil, err
	}
	return line[:len(line)-1], nil
}
