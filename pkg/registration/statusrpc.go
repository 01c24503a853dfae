package registration

// The registrar's state, read through the registration socket, for
// --diagnose run in the registrar's container: it needs no HTTP endpoint.
// Status is a third call of the registrar's own service beside HandOver
// and PortWanted; upstream's registrar and older builds answer
// Unimplemented.

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// StatusMethod is the full name of the call that returns the Status of the
// registrar serving a registration socket, as JSON in a StringValue.
const StatusMethod = "/" + handover.ServiceName + "/Status"

func (r *rpcServer) status() (*wrapperspb.StringValue, error) {
	body, err := json.Marshal(r.s.Status())
	if err != nil {
		return nil, err
	}
	return &wrapperspb.StringValue{Value: string(body)}, nil
}
