package cbgrpc

import (
	"os"
	"strings"
	"testing"
)

// The README's first Go snippet is examples/readme/main.go from its
// package clause on, so that the snippet compiles and runs as the examples
// module's tests build and run that file; the root module cannot build it
// itself, since go-grpc-middleware is the examples' dependency, not the
// library's.
func TestREADMESnippetIsExamplesReadme(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, snippet, ok := strings.Cut(string(readme), "\n```go\n")
	if !ok {
		t.Fatal("README.md has no Go snippet")
	}
	snippet, _, ok = strings.Cut(snippet, "\n```\n")
	if !ok {
		t.Fatal("README.md's first Go snippet does not end")
	}
	file, err := os.ReadFile("examples/readme/main.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(file), "\npackage main\n")
	if i < 0 {
		t.Fatal("examples/readme/main.go has no package clause after its doc comment")
	}
	want := strings.TrimSpace(string(file[i:]))
	if got := strings.TrimSpace(snippet); got != want {
		t.Errorf("README.md's first Go snippet differs from examples/readme/main.go; the README has\n%s\n\nthe file has\n%s", got, want)
	}
}
