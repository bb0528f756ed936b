package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	wsbinary "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A headless Chromium driven over the DevTools protocol, through a
// websocket client of a hundred lines, so that the module needs no
// browser-driving dependency. It does what the dashboard's test needs:
// open a page, evaluate script in it, take a screenshot.

// chromiumPath finds Debian's chromium: a test fails without it under
// CI=true, and is skipped without it elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found (CI=true requires it: apt-get install chromium)")
	}
	t.Skip("chromium not found: apt-get install chromium")
	return ""
}

var devtoolsLine = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// browser is one headless Chromium with a fresh profile, and one page.
type browser struct {
	t    *testing.T
	ws   *wsConn
	page string // the DevTools session of the page

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpMessage
	done    chan struct{}
	err     error
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    any             `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts Chromium, killed with its children by t.Cleanup, and
// opens a blank page of width × height.
func startBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	cmd := exec.Command(chromiumPath(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	// Its own process group: the renderers go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	found := make(chan string, 1)
	var lines []string
	var linesMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			linesMu.Lock()
			lines = append(lines, sc.Text())
			linesMu.Unlock()
			if m := devtoolsLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	var wsURL string
	select {
	case wsURL = <-found:
	case <-time.After(30 * time.Second):
		linesMu.Lock()
		defer linesMu.Unlock()
		t.Fatalf("chromium did not open its DevTools port within 30s; stderr:\n%q", lines)
	}
	ws, err := dialWebsocket(wsURL)
	if err != nil {
		t.Fatalf("DevTools websocket %s: %v", wsURL, err)
	}
	b := &browser{t: t, ws: ws, pending: map[int64]chan cdpMessage{}, done: make(chan struct{})}
	t.Cleanup(func() { ws.Close() })
	go b.read()
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.callSession("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.callSession("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.page = attached.SessionID
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

// read delivers the answers to the calls; events are not used.
func (b *browser) read() {
	defer close(b.done)
	for {
		data, err := b.ws.ReadMessage()
		if err != nil {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil || m.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// call calls a method of the page's session and decodes its result into
// out (unless nil).
func (b *browser) call(method string, params any, out any) {
	b.t.Helper()
	b.callSession(b.page, method, params, out)
}

func (b *browser) callSession(session, method string, params any, out any) {
	b.t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg, _ := json.Marshal(cdpMessage{ID: id, Method: method, Params: params, SessionID: session})
	if err := b.ws.WriteMessage(msg); err != nil {
		b.t.Fatalf("DevTools %s: %v", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			b.t.Fatalf("DevTools %s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				b.t.Fatalf("DevTools %s: result %s: %v", method, m.Result, err)
			}
		}
	case <-b.done:
		b.t.Fatalf("DevTools %s: connection ended: %v", method, b.err)
	case <-time.After(30 * time.Second):
		b.t.Fatalf("DevTools %s: no answer within 30s", method)
	}
}

// eval evaluates expr in the page, awaiting it if it is a promise, and
// decodes its value into out (unless nil).
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r)
	if r.Exception != nil {
		b.t.Fatalf("evaluating %s: %s %s", expr, r.Exception.Text, r.Exception.Exception.Description)
	}
	if out != nil && r.Result.Value != nil {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("evaluating %s: value %s: %v", expr, r.Result.Value, err)
		}
	}
}

// waitFor evaluates expr until it is true, polling, or fails the test
// after timeout.
func (b *browser) waitFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		b.eval("!!("+expr+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var text string
			b.eval("document.body.innerText", &text)
			b.t.Fatalf("no %s within %v; the page reads:\n%s", what, timeout, text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *browser) navigate(u string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": u}, nil)
	b.waitFor("page load of "+u, `document.readyState === "complete" && location.href === `+jsString(u), 10*time.Second)
}

// screenshot writes a PNG of the page to path.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	b.call("Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// wsConn is the client side of a websocket (RFC 6455), text messages
// only: what the DevTools protocol needs.
type wsConn struct {
	conn net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex
}

func dialWebsocket(rawURL string) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	key := base64.StdEncoding.EncodeToString([]byte(rand.Text())[:16])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, key)
	r := bufio.NewReader(conn)
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: %s", res.Status)
	}
	return &wsConn{conn: conn, r: r}, nil
}

const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xA
)

func (c *wsConn) WriteMessage(payload []byte) error { return c.writeFrame(wsText, payload) }

// writeFrame writes one final frame, masked as a client must.
func (c *wsConn) writeFrame(op byte, payload []byte) error {
	hdr := make([]byte, 2, 14)
	hdr[0] = 0x80 | op
	switch n := len(payload); {
	case n < 126:
		hdr[1] = 0x80 | byte(n)
	case n < 1<<16:
		hdr[1] = 0x80 | 126
		hdr = wsbinary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr[1] = 0x80 | 127
		hdr = wsbinary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	frame := append(hdr, payload...)
	for i := range payload {
		frame[len(hdr)+i] ^= mask[i%4]
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.conn.Write(frame)
	return err
}

// ReadMessage returns the next text or binary message, answering pings.
func (c *wsConn) ReadMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return nil, err
		}
		fin, op := h[0]&0x80 != 0, h[0]&0x0f
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.r, b[:]); err != nil {
				return nil, err
			}
			n = uint64(wsbinary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.r, b[:]); err != nil {
				return nil, err
			}
			n = wsbinary.BigEndian.Uint64(b[:])
		}
		var mask [4]byte
		masked := h[1]&0x80 != 0
		if masked {
			if _, err := io.ReadFull(c.r, mask[:]); err != nil {
				return nil, err
			}
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return nil, err
		}
		if masked {
			for i := range payload {
				payload[i] ^= mask[i%4]
			}
		}
		switch op {
		case wsClose:
			return nil, errors.New("websocket closed by the browser")
		case wsPing:
			if err := c.writeFrame(wsPong, payload); err != nil {
				return nil, err
			}
		case wsPong:
		case wsText, wsBinary, wsContinuation:
			msg = append(msg, payload...)
			if fin {
				return msg, nil
			}
		}
	}
}

func (c *wsConn) Close() error { return c.conn.Close() }
