package cbgrpc

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf8"
)

// maxReplicaID bounds a replica's ID: the coordinator keeps it with what
// it tracks of the replicas that fail (implement.TrackedReplicas per
// scope).
const maxReplicaID = 256

// WithReplicaID names this replica of the service to the coordinator,
// which attributes the failures and slow calls of its Records to it, so
// that one replica failing alone does not open the breaker for the fleet
// (Policy.Outliers), and shows which replicas are outliers (cbctl show).
// Give each replica of a fleet its own ID, and the same one across a
// restart: the pod's name, say. The default is the host's name, the
// process ID and a random part drawn once per process, "host:pid:rand",
// which Breakers of one process share: they are one replica. A restart
// is a new replica under the default. An ID is at most 256 bytes of UTF-8
// without control characters.
func WithReplicaID(id string) Option {
	return optionFunc(func(c *config) { c.replica = id })
}

// defaultReplicaID is this process as a replica, the same for every
// Breaker of it.
var defaultReplicaID = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return replicaIDOf(host, os.Getpid())
})

// replicaIDOf is "host:pid:" and eight hex digits drawn at random: with
// host networking and a PID namespace per container, every pod of a node
// is node:1, and two processes that share an ID are one replica to the
// coordinator, a healthy one punished with a bad one.
func replicaIDOf(host string, pid int) string {
	var b [4]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return host + ":" + strconv.Itoa(pid) + ":" + hex.EncodeToString(b[:])
}

// checkReplicaID says what is wrong with a replica ID, if anything.
func checkReplicaID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("cbgrpc: WithReplicaID: the ID is empty; leave the option out for the default, host:pid:rand")
	case len(id) > maxReplicaID:
		return fmt.Errorf("cbgrpc: WithReplicaID: the ID is %d bytes; at most %d", len(id), maxReplicaID)
	case !utf8.ValidString(id):
		return fmt.Errorf("cbgrpc: WithReplicaID: %q is not valid UTF-8", id)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("cbgrpc: WithReplicaID: %q holds the control character %U", id, r)
		}
	}
	return nil
}
