package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The tests run the example as a program: this test binary, run again with
// runMain set, is the example.
const runMain = "CBGRPC_FLEET_EXAMPLE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// example starts the example with args.
func example(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMain+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &stdout, &stderr
}

func keys(t *testing.T, rdb *goredis.Client) int64 {
	t.Helper()
	n, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var deleted = regexp.MustCompile(`Deleted the (\d+) keys under "cbgrpc-fleet-\d+:" from Redis at `)

// A run with -redis leaves nothing in the Redis.
func TestFleetRedisDeletesItsKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cmd, stdout, stderr := example(t, "-redis", srv.Addr(), "-replicas", "4", "-every", "5ms", "-healthy", "300ms")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fleet -redis: %v\n%s\n%s", err, stdout, stderr)
	}
	m := deleted.FindStringSubmatch(stdout.String())
	if m == nil || !bytes.Contains(stdout.Bytes(), []byte("The dependency absorbed ")) {
		t.Fatalf("fleet -redis printed\n%s\nwant the comparison and how many keys it deleted", stdout)
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Errorf("fleet -redis deleted no key: its breakers kept no state in Redis?\n%s", stdout)
	}
	if n := keys(t, rdb); n != 0 {
		t.Errorf("%d keys left in Redis after fleet -redis; want none", n)
	}
}

// Interrupted with Ctrl-C, it deletes its keys before it exits.
func TestFleetRedisInterruptDeletesItsKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// Slow enough that no breaker trips before the interrupt.
	cmd, stdout, stderr := example(t, "-redis", srv.Addr(), "-replicas", "2", "-every", "500ms")
	for deadline := time.Now().Add(20 * time.Second); keys(t, rdb) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fleet -redis wrote no key within 20s\n%s\n%s", stdout, stderr)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("fleet -redis still running 20s after SIGINT\n%s\n%s", stdout, stderr)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 || !bytes.Contains(stderr.Bytes(), []byte("interrupted")) {
		t.Errorf("fleet -redis after SIGINT: %v, stderr %q; want exit status 130, interrupted", err, stderr)
	}
	if !deleted.Match(stdout.Bytes()) {
		t.Errorf("fleet -redis after SIGINT printed\n%s\nwant how many keys it deleted", stdout)
	}
	if n := keys(t, rdb); n != 0 {
		t.Errorf("%d keys left in Redis after fleet -redis was interrupted; want none", n)
	}
}
