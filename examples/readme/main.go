// Command readme is the README's first snippet, as it is there:
// readme_snippet_test.go in the library's root fails when the two differ.
// It builds the client a service ships, but calls nothing.
package main

import (
	"log"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cbgrpc/cbgrpc"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

func main() {
	rdb := goredis.NewClient(&goredis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // each Redis command ends with its call's deadline
	})
	defer rdb.Close()

	// Options go here: cbgrpc.WithReplicaID(podName), cbgrpc.WithPolicy(p), ...
	b, err := cbgrpc.New(cbredis.New(rdb))
	if err != nil {
		log.Fatal(err) // an option that cannot work, named
	}
	defer b.Close() // sends the outcomes still waiting; runs before rdb.Close

	conn, err := grpc.NewClient("payments.example:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Retry outside (before) the breaker: each attempt is admitted and
		// counted on its own, and RetryOn never retries a rejection.
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(retry.WithMax(3),
				retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...))),
			b.UnaryClientInterceptor(),
		),
		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	// Use conn with your generated client, e.g. paymentspb.NewPaymentsClient(conn).
	// A call to /payments.v1.Payments/Charge has the scope
	// "payments.example:443/payments.v1.Payments/Charge", which cbctl takes.
}
