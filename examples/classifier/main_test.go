package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// The example prints a table: a header, then per method its calls, the
// answers by code and the rejections, which add up.
func TestClassifierPrintsTable(t *testing.T) {
	var out bytes.Buffer
	if err := demo(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "map[") {
		t.Errorf("the example prints a Go map:\n%s", &out)
	}
	// The table stands between blank lines, after the introduction.
	parts := strings.Split(out.String(), "\n\n")
	if len(parts) != 3 {
		t.Fatalf("want an introduction, a table and a conclusion, apart:\n%s", &out)
	}
	table := strings.Split(parts[1], "\n")
	header := "method     calls  answered NotFound  rejected by the breaker"
	if len(table) != 3 || table[0] != header {
		t.Fatalf("table:\n%s\nwant the header %q and two rows\n\n%s", strings.Join(table, "\n"), header, &out)
	}
	cols := []int{0, strings.Index(header, "calls"), strings.Index(header, "answered"), strings.Index(header, "rejected")}
	for _, row := range table[1:] {
		var f []string
		for i, c := range cols {
			end := len(row)
			if i+1 < len(cols) {
				end = cols[i+1]
			}
			if c > len(row) || end > len(row) {
				t.Fatalf("row %q does not line up with the header %q", row, header)
			}
			f = append(f, strings.TrimSpace(row[c:end]))
		}
		calls, _ := strconv.Atoi(f[1])
		answered, _ := strconv.Atoi(f[2])
		rejected, _ := strconv.Atoi(f[3])
		if calls != 40 || answered+rejected != calls {
			t.Errorf("row %q: %d calls, %d answered, %d rejected; want 40 = answered + rejected", row, calls, answered, rejected)
		}
		switch f[0] {
		case "EmptyCall":
			if rejected != 0 {
				t.Errorf("EmptyCall: %d rejected; its NotFounds are successes, want none", rejected)
			}
		case "UnaryCall":
			if rejected == 0 || answered < 10 {
				t.Errorf("UnaryCall: %d answered, %d rejected; want its breaker open after at least 10 failures", answered, rejected)
			}
		default:
			t.Errorf("row %q: unknown method %q", row, f[0])
		}
	}
}
