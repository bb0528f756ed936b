package cbgrpc

import (
	"fmt"
	"os"
	"strconv"
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
// restart: the pod's name, say. The default is the host's name and the
// process ID, "host:pid", which Breakers of one process share: they are
// one replica. An ID is at most 256 bytes of UTF-8 without control
// characters.
func WithReplicaID(id string) Option {
	return optionFunc(func(c *config) { c.replica = id })
}

// defaultReplicaID is this process as a replica: "host:pid".
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// checkReplicaID says what is wrong with a replica ID, if anything.
func checkReplicaID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("cbgrpc: WithReplicaID: the ID is empty; leave the option out for the default, host:pid")
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
