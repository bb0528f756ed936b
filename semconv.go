package cbgrpc

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The attributes of the OpenTelemetry semantic conventions are those of
// v1.43.0 (the semconv import), the version otelgrpc v0.72 follows, set as
// it sets them: a rejected call's span then reads like the spans of the
// calls otelgrpc traces, and the metrics join its rpc.client.call.duration
// on rpc.method.

// statusUnavailable is the value of rpc.response.status_code for a
// rejected call: the name of the code, as the conventions spell it.
const statusUnavailable = "UNAVAILABLE"

// maxMethods bounds the methods the decision metric names. A process calls
// the methods of the services it was built against, but one that makes
// method names or ClientConns at run time (a proxy, a reflective client)
// must not grow the number of time series without end: past the bound,
// methods read "_OTHER" in metrics, as the semantic conventions name
// values they do not know. Spans, which make no series, still name them.
const maxMethods = 1000

// rpcMethods makes the attributes of a target and method, which the
// route of their calls keeps (route.go): made once per route.
type rpcMethods struct {
	// base is what every metric carries (the Breaker's name).
	base  []attribute.KeyValue
	other *rpcMetrics
	named atomic.Int32 // the methods with metrics of their own, up to maxMethods
}

// rpcMethod is what telemetry says of the calls of one method on one
// ClientConn's target.
type rpcMethod struct {
	name string               // the span's: "pkg.Service/Method"
	span []attribute.KeyValue // rpc.method, rpc.system.name, server.*
	// rpcMetrics is the method's own, or past maxMethods the one of
	// "_OTHER" that such methods share.
	*rpcMetrics
}

// rpcMetrics is the attributes of a method in metrics and the options of
// its decisions, by verdict and by decider, made once: the cached
// admission path must not allocate per call.
type rpcMetrics struct {
	attrs     []attribute.KeyValue
	decisions [coordinator.Reject + 1][deciders][]metric.AddOption
}

func (ms *rpcMethods) init(base []attribute.KeyValue) {
	ms.base = base
	ms.other = ms.newMetrics([]attribute.KeyValue{semconv.RPCMethodKey.String("_OTHER"), semconv.RPCSystemNameGRPC})
}

// describe makes the attributes of full ("/pkg.Service/Method") called on
// cc (nil: none known). named: its route is remembered, so that it may
// have metrics of its own, while fewer than maxMethods do.
func (ms *rpcMethods) describe(cc *grpc.ClientConn, full string, named bool) *rpcMethod {
	name, kvs := rpcAttrs(full)
	if cc != nil {
		kvs = append(kvs, serverAttrs(cc.CanonicalTarget())...)
	}
	m := &rpcMethod{name: name, span: kvs, rpcMetrics: ms.other}
	if named && ms.named.Add(1) <= maxMethods {
		m.rpcMetrics = ms.newMetrics(kvs)
	}
	return m
}

func (ms *rpcMethods) newMetrics(kvs []attribute.KeyValue) *rpcMetrics {
	m := &rpcMetrics{attrs: append(kvs[:len(kvs):len(kvs)], ms.base...)}
	for v := range m.decisions {
		for by := range m.decisions[v] {
			all := append([]attribute.KeyValue{attrVerdict.String(coordinator.Verdict(v).String()), attrSource.String(decider(by).String())}, m.attrs...)
			m.decisions[v][by] = []metric.AddOption{metric.WithAttributes(all...)}
		}
	}
	return m
}

// rpcAttrs returns the span name ("pkg.Service/Method") and the RPC
// attributes of a full method ("/pkg.Service/Method"), read as otelgrpc
// reads them: rpc.method is the whole name, service and method.
func rpcAttrs(full string) (name string, kvs []attribute.KeyValue) {
	if !strings.HasPrefix(full, "/") {
		return full, []attribute.KeyValue{semconv.RPCSystemNameGRPC}
	}
	name = full[1:]
	return name, []attribute.KeyValue{semconv.RPCMethodKey.String(name), semconv.RPCSystemNameGRPC}
}

// serverAttrs returns server.address and server.port of a ClientConn's
// canonical target ("dns:///api.example.com:443", "passthrough:///10.0.0.7:80",
// "unix:///run/api.sock"), read as otelgrpc reads a dial target: the
// endpoint's host and numeric port, the path of a unix socket, and the
// whole target when no endpoint can be read from it.
func serverAttrs(target string) []attribute.KeyValue {
	if host, port, ok := hostPort(target); ok && port >= 0 {
		return []attribute.KeyValue{semconv.ServerAddressKey.String(host), semconv.ServerPortKey.Int(port)}
	}
	u, err := url.Parse(target)
	if err != nil {
		return []attribute.KeyValue{semconv.ServerAddressKey.String(target)}
	}
	endpoint := u.Path
	if u.Scheme != "unix" && u.Scheme != "unix-abstract" {
		// The slash before the endpoint is the URI's, but a socket's path
		// begins with its own.
		endpoint = strings.TrimPrefix(endpoint, "/")
	}
	if endpoint == "" {
		endpoint = u.Opaque
	}
	if endpoint == "" {
		return []attribute.KeyValue{semconv.ServerAddressKey.String(target)}
	}
	host, port, ok := hostPort(endpoint)
	switch {
	case !ok:
		return []attribute.KeyValue{semconv.ServerAddressKey.String(endpoint)}
	case port < 0:
		return []attribute.KeyValue{semconv.ServerAddressKey.String(host)}
	}
	return []attribute.KeyValue{semconv.ServerAddressKey.String(host), semconv.ServerPortKey.Int(port)}
}

// hostPort splits s as "host:port"; port is -1 when it is not a number.
func hostPort(s string) (host string, port int, ok bool) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, false
	}
	if port, err = strconv.Atoi(p); err != nil {
		return host, -1, true
	}
	return host, port, true
}
