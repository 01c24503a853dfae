package registration

// Releasing the HTTP endpoint's port to a newer instance on the same
// network. The pods of a rolling update with hostNetwork share the node's
// network: the new registrar finds the --http-endpoint port taken by the
// old one and waits for it (pkg/httpport). Whenever an instance steps
// aside for another instance of the registrar (a handover, or a socket
// replaced over its own), it asks the new owner through the registration
// socket which address it waits for and in which network namespace
// (PortWanted), and stops listening there if it is its own: from then on
// the instance that owns the registration answers the probes of both pods.
// An owner that does not know the call (upstream's registrar, an older
// build) answers Unimplemented, and nothing changes.

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// PortSharing is the HTTP endpoint's port, as the registration hands it
// over (a *httpport.Port).
type PortSharing interface {
	// Wanted returns the address and network namespace this instance
	// waits for, because the address is in use; empty strings otherwise.
	Wanted() (address, netns string)
	// Release stops listening, for another instance that waits for the
	// same address in the same network namespace; it tells whether it did.
	Release(address, netns string) bool
	// Claim listens again after a Release.
	Claim()
	// Expect: the instance holding the address this one waits for is
	// about to release it; try it often for a moment.
	Expect()
}

// portWanted is the answer to PortWanted, as JSON in a StringValue.
type portWanted struct {
	Address string `json:"httpAddress,omitempty"`
	NetNS   string `json:"netns,omitempty"`
}

func (r *rpcServer) portWanted() (*wrapperspb.StringValue, error) {
	var answer portWanted
	if r.s.cfg.HTTPPort != nil {
		answer.Address, answer.NetNS = r.s.cfg.HTTPPort.Wanted()
		if answer.Address != "" {
			// The caller asks because it steps aside: it releases the
			// address next if it holds it.
			r.s.cfg.HTTPPort.Expect()
		}
	}
	body, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	return &wrapperspb.StringValue{Value: string(body)}, nil
}

// askPortWanted asks the instance serving path which HTTP address it
// waits for.
func askPortWanted(ctx context.Context, path string) (portWanted, error) {
	var answer portWanted
	err := unixgrpc.InvokeJSON(ctx, path, "/"+handover.ServiceName+"/PortWanted", struct{}{}, &answer)
	return answer, err
}

// releasePortTo gives this instance's HTTP port to the instance that now
// serves path, if that one waits for it on the same network.
func (l *loop) releasePortTo(path string) {
	if l.cfg.HTTPPort == nil {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.CheckTimeout)
	defer cancel()
	wanted, err := askPortWanted(ctx, path)
	if err != nil {
		l.logger.V(4).Info("The instance serving the registration socket did not say which HTTP port it waits for", "err", err)
		return
	}
	if wanted.Address != "" && l.cfg.HTTPPort.Release(wanted.Address, wanted.NetNS) {
		l.logger.Info("Released the --http-endpoint port to the instance that now serves the registration socket: it answers the probes on this network from now on", "address", wanted.Address)
	}
}
