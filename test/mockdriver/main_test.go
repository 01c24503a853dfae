package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAnswerNodeGetInfo(t *testing.T) {
	answer, err := answerNodeGetInfo(context.Background(), "node-1", false, false)
	if err != nil || answer.GetNodeId() != "node-1" {
		t.Errorf("answer = %v, %v; want node ID node-1", answer, err)
	}
	if _, err := answerNodeGetInfo(context.Background(), "node-1", true, false); status.Code(err) != codes.Internal {
		t.Errorf("failing: %v, want Internal", err)
	}
	// Hanging: no answer until the caller's deadline.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	if answer, err := answerNodeGetInfo(ctx, "node-1", false, true); status.Code(err) != codes.DeadlineExceeded || answer != nil {
		t.Errorf("hanging: %v, %v; want DeadlineExceeded once the caller gave up", answer, err)
	}
}
