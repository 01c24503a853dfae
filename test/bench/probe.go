package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// probeClient makes GET requests the way kubelet's HTTP prober sends them,
// but with as little work of its own as possible: the load generator shares
// the machine's cores with the registrar, and a heavier client (net/http's
// Transport starts two goroutines per connection) would make the
// registrar's latency look worse than it is. With keepAlive false it opens a
// new connection for each request and asks the server to close it, as
// kubelet does; with keepAlive true it keeps one connection.
type probeClient struct {
	addr      string
	request   []byte
	keepAlive bool
	// dialer turns TCP keep-alive probes off: each setting is a system
	// call of the client's for every new connection, and no connection
	// here lives long enough for a probe.
	dialer net.Dialer

	conn   net.Conn
	reader *bufio.Reader
}

func newProbeClient(addr, path string, keepAlive bool) *probeClient {
	connection := "close"
	if keepAlive {
		connection = "keep-alive"
	}
	request := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: kube-probe/bench\r\nAccept: */*\r\nConnection: %s\r\n\r\n", path, addr, connection)
	return &probeClient{addr: addr, request: []byte(request), keepAlive: keepAlive,
		dialer: net.Dialer{Timeout: stepTimeout, KeepAlive: -1}}
}

// get makes one request and reads the whole answer.
func (c *probeClient) get() (int, error) {
	if c.conn == nil {
		conn, err := c.dialer.Dial("tcp", c.addr)
		if err != nil {
			return 0, err
		}
		c.conn, c.reader = conn, bufio.NewReaderSize(conn, 1024)
	}
	if err := c.conn.SetDeadline(time.Now().Add(stepTimeout)); err != nil {
		c.close()
		return 0, err
	}
	if _, err := c.conn.Write(c.request); err != nil {
		c.close()
		return 0, err
	}
	resp, err := http.ReadResponse(c.reader, nil)
	if err != nil {
		c.close()
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil || !c.keepAlive {
		c.close()
	}
	return resp.StatusCode, err
}

func (c *probeClient) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}
