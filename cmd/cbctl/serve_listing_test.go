package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// Ten thousand scopes: the table is paged on the server, 100 a page.
func TestServeManyScopes(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	// The scopes outlive the test: on a loaded machine, making and listing
	// them took longer than the default window, and the first ones had
	// expired before the dashboard listed them.
	f.p.Window = 10 * time.Minute
	const n = 10000
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := f.c.Admit(context.Background(), coordinator.AdmitRequest{Scope: fmt.Sprintf("svc/many-%05d", i), Policy: f.p, Claim: "c"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d scopes made in %v", n, time.Since(start))
	start = time.Now()
	s := startServe(t, srv.Addr(), nil, "--timeout", "60s")
	var p pageJSON
	decode(t, s.want(request{path: "/api/scopes?sort=scope"}, 200).body, &p)
	t.Logf("first page of %d scopes served %v after start", p.Scopes, time.Since(start))
	if p.Scopes != n || p.Matched != n || p.Pages != n/defaultPageSize || len(p.Rows) != defaultPageSize ||
		p.Rows[0].Scope != "svc/many-00000" || p.Rows[99].Scope != "svc/many-00099" {
		t.Fatalf("first page: %d scopes, %d matched, %d pages, %d rows", p.Scopes, p.Matched, p.Pages, len(p.Rows))
	}
	decode(t, s.want(request{path: "/api/scopes?sort=scope&page=100"}, 200).body, &p)
	if p.Page != 100 || len(p.Rows) != 100 || p.Rows[99].Scope != "svc/many-09999" {
		t.Errorf("last page: page %d, %d rows, last %q", p.Page, len(p.Rows), p.Rows[len(p.Rows)-1].Scope)
	}
	decode(t, s.want(request{path: "/api/scopes?page=101&size=1000"}, 200).body, &p)
	if p.Page != 10 || p.Pages != 10 || len(p.Rows) != 1000 {
		t.Errorf("page past the last: page %d of %d, %d rows; want the last, 10", p.Page, p.Pages, len(p.Rows))
	}
	decode(t, s.want(request{path: "/api/scopes?q=many-0999"}, 200).body, &p)
	t.Logf("last request answered %v after start", time.Since(start))
	if p.Matched != 10 || p.Scopes != n {
		t.Errorf("filter many-0999: %d of %d; want 10 of %d", p.Matched, p.Scopes, n)
	}
}
