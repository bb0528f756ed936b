package cbgrpc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEveryOperationIsListed reads the package's code for the operation of
// every coordinator call (exchange.op), and wants each one in operations: a
// call missing from it gets no precomputed metric options, and the telemetry page
// would not list it (push slipped through once). An operation passed on by
// control or inspect is read where they are called.
func TestEveryOperationIsListed(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	check := func(e ast.Expr, where string) {
		switch v := e.(type) {
		case *ast.BasicLit:
			op, err := strconv.Unquote(v.Value)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			found = append(found, op)
			if !slices.Contains(operations, op) {
				t.Errorf("%s: operation %q is not in telemetry.go's operations %v", where, op, operations)
			}
		case *ast.Ident:
			if v.Name != "op" {
				t.Errorf("%s: operation %s is neither a literal nor the op of control or inspect", where, v.Name)
			}
		default:
			t.Errorf("%s: operation %T is neither a literal nor the op of control or inspect", where, e)
		}
	}
	for _, f := range pkgs["cbgrpc"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "exchange" {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "op" {
							check(kv.Value, fset.Position(kv.Pos()).String())
						}
					}
				}
			case *ast.CallExpr:
				// b.control(ctx, scope, op, ...) and b.inspect(ctx, op, ...)
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					switch {
					case sel.Sel.Name == "control" && len(n.Args) > 2:
						check(n.Args[2], fset.Position(n.Pos()).String())
					case sel.Sel.Name == "inspect" && len(n.Args) > 1:
						check(n.Args[1], fset.Position(n.Pos()).String())
					}
				}
			}
			return true
		})
	}
	// The metrics table the README links (telemetryDoc) names every one.
	doc, err := os.ReadFile(telemetryDoc)
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `cbgrpc.coordinator.duration`") {
			row = line
		}
	}
	for _, op := range operations {
		if !strings.Contains(row, "`"+op+"`") {
			t.Errorf("%s: the row of cbgrpc.coordinator.duration does not name the operation %q: %q", telemetryDoc, op, row)
		}
	}
	// The reading itself must have found the calls it is about.
	for _, op := range []string{"admit", "record", "settle", "push", "isolate", "snapshot", "list"} {
		if !slices.Contains(found, op) {
			t.Errorf("found the operations %v in the code; want %q among them: the test no longer reads the code as it is", found, op)
		}
	}
}
