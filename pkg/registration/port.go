package registration

// Releasing the HTTP endpoint's port to a newer instance on the same
// network. The pods of a rolling update with hostNetwork share the node's
// network: the new registrar finds the HTTP endpoint's port taken by the
// old one and waits for it (pkg/httpport). Whenever an instance steps
// aside for another instance of the registrar (a handover, or a socket
// replaced over its own), its caller asks the new owner through the
// registration socket which address it waits for and in which network
// namespace (AskPortWanted), and stops listening there if it is its own:
// from then on the instance that owns the registration answers the probes
// of both pods.
// An owner that does not know the call (upstream's registrar, an older
// build) answers Unimplemented, and nothing changes.

import (
	"context"
	"encoding/json"

	"k8s.io/klog/v2"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// HTTPPort is the HTTP endpoint's port (a *httpport.Port), as instances
// of the registrar on the same network pass it on.
type HTTPPort interface {
	// Wanted returns the address and network namespace this instance
	// waits for, because the address is in use; empty strings otherwise.
	Wanted() (address, netns string)
	// Expect: the instance holding the address this one waits for is
	// about to release it; try it often for a moment.
	Expect()
	// Release stops listening, for another instance that waits for the
	// same address in the same network namespace; it tells whether it did.
	Release(address, netns string) bool
	// Claim listens again after a Release.
	Claim()
}

// SharePort passes the HTTP endpoint's port between this instance and the
// others on its network: it answers PortWanted with what p waits for, and
// observes the registration: each time this instance steps aside for
// another, it asks the new owner what it waits for and releases p to it;
// each time it publishes a socket again, it claims p back. Call it before
// Run.
func (s *Server) SharePort(ctx context.Context, p HTTPPort) {
	s.port = p
	s.Observe(func(old, now Status) {
		if now.LastPublished != nil && (old.LastPublished == nil || !now.LastPublished.Equal(*old.LastPublished)) {
			p.Claim()
		}
		if now.State == Superseded && old.State != Superseded {
			// A call to another process: never on the registration's
			// goroutine.
			go s.releasePortTo(ctx, p, now.SocketPath)
		}
	})
}

// releasePortTo gives p to the instance that now serves path, if that one
// waits for it on the same network.
func (s *Server) releasePortTo(ctx context.Context, p HTTPPort, path string) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CheckTimeout)
	defer cancel()
	var wanted portWanted
	err := unixgrpc.InvokeJSON(ctx, path, "/"+handover.ServiceName+"/PortWanted", struct{}{}, &wanted)
	if err != nil {
		logger.V(4).Info("The instance serving the registration socket did not say which HTTP port it waits for", "err", err)
		return
	}
	if wanted.Address != "" && p.Release(wanted.Address, wanted.NetNS) {
		logger.Info("Released the --http-endpoint port to the instance that now serves the registration socket: it answers the probes on this network from now on", "address", wanted.Address)
	}
}

// portWanted is the answer to PortWanted, as JSON in a StringValue.
type portWanted struct {
	Address string `json:"httpAddress,omitempty"`
	NetNS   string `json:"netns,omitempty"`
}

func (r *rpcServer) portWanted() (*wrapperspb.StringValue, error) {
	var answer portWanted
	if r.s.port != nil {
		answer.Address, answer.NetNS = r.s.port.Wanted()
		if answer.Address != "" {
			// The caller asks because it steps aside: it releases the
			// address next if it holds it.
			r.s.port.Expect()
		}
	}
	body, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	return &wrapperspb.StringValue{Value: string(body)}, nil
}
