package preview

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct{ Error, Code string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
		t.Fatalf("not a JSON error: %q", body)
	}
	return e.Code
}

func TestPageThroughBearer(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	resp, body := r.get(t, c, "GET", "http://"+r.host(5173, "dev")+"/", bearerHdr())
	if resp.StatusCode != 200 || !strings.Contains(body, "dev page of dev") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	// The same through the name's other case (browsers lowercase hosts) and
	// a name with a dot.
	resp, body = r.get(t, c, "GET", "http://"+r.host(5173, "DEV")+"/", bearerHdr())
	if resp.StatusCode != 200 || !strings.Contains(body, "dev page") {
		t.Fatalf("folded name: %d %q", resp.StatusCode, body)
	}
	resp, _ = r.get(t, c, "GET", "http://"+r.host(5173, "a.b")+"/", bearerHdr())
	if resp.StatusCode != 200 {
		t.Fatalf("dotted name: %d", resp.StatusCode)
	}
	if got := r.dialer.dialed(); got[0] != "dev/5173" {
		t.Fatalf("dialed %q", got)
	}
	if len(r.apiRequests()) != 0 {
		t.Fatal("a preview host's request reached the API")
	}
}

func TestCredentialsRemovedBeforeTheApp(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	host := r.host(5173, "dev")
	h := bearerHdr()
	h["Cookie"] = "theme=dark; " + r.previewCookie(host) + "; " + signin.CookieName + "=x; lang=en"
	h["X-Forwarded-For"] = "6.6.6.6"
	h["X-Forwarded-Prefix"] = "/spoofed"
	resp, body := r.get(t, c, "GET", "http://"+host+"/echo?a=1", h)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	e := r.echoOf(t, body)
	if e.Header.Get("Authorization") != "" {
		t.Fatalf("the app saw the bearer token: %q", e.Header.Get("Authorization"))
	}
	if got := e.Header.Get("Cookie"); got != "theme=dark; lang=en" {
		t.Fatalf("the app saw cookies %q, want only its own", got)
	}
	if e.URI != "/echo?a=1" || e.Header.Get("X-Forwarded-For") != "127.0.0.1" || e.Header.Get("X-Forwarded-Host") != host ||
		e.Header.Get("X-Forwarded-Proto") != "http" || e.Header.Get("X-Forwarded-Prefix") != "" {
		t.Fatalf("forwarded as %+v", e)
	}
	// An app's own Authorization passes when the preview cookie signs in.
	resp, body = r.get(t, c, "GET", "http://"+host+"/echo", hdr{"Authorization": "Basic YXBwOmFwcA==", "Cookie": r.previewCookie(host)})
	if e := r.echoOf(t, body); resp.StatusCode != 200 || e.Header.Get("Authorization") != "Basic YXBwOmFwcA==" || e.Header.Get("Cookie") != "" {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
}

func TestHostRewrittenOrKept(t *testing.T) {
	for _, keep := range []bool{false, true} {
		r := newRig(t, keep)
		host := r.host(5173, "dev")
		resp, body := r.get(t, r.client(nil, false), "GET", "http://"+host+"/echo", bearerHdr())
		want := "localhost:5173"
		if keep {
			want = host
		}
		if e := r.echoOf(t, body); resp.StatusCode != 200 || e.Host != want {
			t.Fatalf("keep=%v: the app saw Host %q, want %q", keep, e.Host, want)
		}
	}
}

func TestSetCookieKeptOnThePreviewHost(t *testing.T) {
	r := newRig(t, false)
	resp, _ := r.get(t, r.client(nil, false), "GET", "http://"+r.host(5173, "dev")+"/set-cookie", bearerHdr())
	got := strings.Join(resp.Header.Values("Set-Cookie"), " | ")
	if got != "app=1; Path=/ | own=1; Domain=5173-dev.localhost; Path=/" {
		t.Fatalf("Set-Cookie passed: %q", got)
	}
}

func TestServerSentEventsOneByOne(t *testing.T) {
	r := newRig(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+r.host(5173, "dev")+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := r.client(nil, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	events := make(chan string)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
	}()
	// The app sends event n+1 only once the test has read event n: each
	// must come through alone, before the stream ends.
	for i := range sseEvents {
		got := testkit.Receive(t, patience, events, "event through the preview")
		if want := "event " + string(rune('0'+i)); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		r.app.sseAck <- i
	}
	if _, more := <-events; more {
		t.Fatal("an event after the last")
	}
}

func TestWebSocketThroughBearerAndCookie(t *testing.T) {
	r := newRig(t, false)
	host := r.host(5173, "dev")
	for name, h := range map[string]http.Header{
		"bearer": {"Authorization": {"Bearer " + testToken}},
		// A browser's upgrade: cookie, and Accept naming HTML too; it is
		// never redirected.
		"cookie": {"Cookie": {r.previewCookie(host)}, "Accept": {"text/html"}},
	} {
		c, resp, err := r.wsDial(t, host, "/ws", h)
		if err != nil {
			t.Fatalf("%s: %v (%v)", name, err, resp)
		}
		wsEcho(t, c, "dev")
		c.Close()
	}
}

func TestDownloadWholeAndStreamed(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	want := patternSum(downloadSize)

	resp, body := r.get(t, c, "GET", "http://"+r.host(5173, "dev")+"/download", bearerHdr())
	if resp.StatusCode != 200 || len(body) != downloadSize || sha256.Sum256([]byte(body)) != want {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(body))
	}

	// Gated: the app writes its first MiB and waits; the first bytes must
	// come through while the app has not finished.
	r.app.finished.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+r.host(5173, "dev")+"/download?gate=1", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan error, 1)
	h := sha256.New()
	go func() {
		_, err := io.CopyN(h, resp.Body, firstPart)
		first <- err
	}()
	if err := testkit.Receive(t, patience, first, "the first MiB before the app finished writing (is the preview buffering?)"); err != nil {
		t.Fatal(err)
	}
	if r.app.finished.Load() {
		t.Fatal("the app finished before its gate opened")
	}
	r.app.open()
	n, err := io.Copy(h, resp.Body)
	if err != nil || n != downloadSize-firstPart {
		t.Fatalf("rest: %d bytes, %v", n, err)
	}
	if [32]byte(h.Sum(nil)) != want {
		t.Fatal("the streamed download differs")
	}
}

func TestNoCredentials(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	host := r.host(5173, "dev")

	resp, _ := r.get(t, c, "GET", "http://"+host+"/app?x=1", hdr{"Accept": "text/html,application/xhtml+xml"})
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("page load: %d", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Scheme != "http" || loc.Host != "localhost:"+r.port || loc.Path != "/preview-signin" ||
		loc.Query().Get("host") != host || loc.Query().Get("next") != "/app?x=1" {
		t.Fatalf("redirected to %q", resp.Header.Get("Location"))
	}

	for name, req := range map[string]struct {
		method string
		h      hdr
	}{
		"xhr":        {"GET", hdr{"Accept": "application/json"}},
		"no accept":  {"GET", nil},
		"post page":  {"POST", hdr{"Accept": "text/html"}},
		"wrong auth": {"GET", hdr{"Authorization": "Bearer nope"}},
		"bad cookie": {"GET", hdr{"Cookie": CookieName + "=1.abc"}},
	} {
		resp, body := r.get(t, c, req.method, "http://"+host+"/echo", req.h)
		if resp.StatusCode != 401 || errorCode(t, body) != "unauthorized" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, body)
		}
	}
	_, resp, err = r.wsDial(t, host, "/ws", http.Header{"Accept": {"text/html"}})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("upgrade without credentials: %v %v", err, resp)
	}
	if r.app.sawURI("/") {
		t.Fatal("a request without credentials reached the app")
	}
	// A CORS preflight never carries credentials; it goes in, the request
	// it asks about does not.
	resp, body := r.get(t, c, "OPTIONS", "http://"+host+"/echo", hdr{"Origin": "http://3000-dev.localhost:" + r.port, "Access-Control-Request-Method": "POST"})
	if e := r.echoOf(t, body); resp.StatusCode != 200 || e.Method != "OPTIONS" {
		t.Fatalf("preflight: %d %q", resp.StatusCode, body)
	}
	if resp, _ = r.get(t, c, "OPTIONS", "http://"+host+"/echo", nil); resp.StatusCode != 401 {
		t.Fatalf("OPTIONS that is no preflight: %d", resp.StatusCode)
	}
	// Names are not told to a caller without credentials.
	resp, _ = r.get(t, c, "GET", "http://"+r.host(5173, "nope")+"/", hdr{"Accept": "application/json"})
	if resp.StatusCode != 401 {
		t.Fatalf("unknown name without credentials: %d", resp.StatusCode)
	}
}

// signinRound follows the browser's whole round from a page load on host.
func TestSignInRound(t *testing.T) {
	r := newRig(t, false)
	jar := newJar(t)
	var hops []string
	c := r.client(jar, true)
	c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		hops = append(hops, req.URL.Host+req.URL.Path)
		return nil
	}
	host := r.host(5173, "dev")
	page := "http://" + host + "/app?x=1"

	// Not signed in to the dashboard: the round ends on the dashboard,
	// told where to come back.
	resp, body := r.get(t, c, "GET", page, hdr{"Accept": "text/html"})
	if resp.StatusCode != 200 || body != "the API" || resp.Request.URL.Host != "localhost:"+r.port || resp.Request.URL.Path != "/" {
		t.Fatalf("not signed in: ended at %v with %d %q", resp.Request.URL, resp.StatusCode, body)
	}
	back := resp.Request.URL.Query().Get("next")
	if !strings.HasPrefix(back, "/preview-signin?") {
		t.Fatalf("dashboard told to return to %q", back)
	}

	// The dashboard signs in and sends the browser back.
	u, _ := url.Parse(r.mainURL("/"))
	jar.SetCookies(u, []*http.Cookie{r.sessionCookie()})
	hops = nil
	jar.SetCookies(&url.URL{Scheme: "http", Host: host, Path: "/"}, []*http.Cookie{{Name: "theme", Value: "dark"}})
	resp, body = r.get(t, c, "GET", r.mainURL(back), hdr{"Accept": "text/html"})
	if resp.StatusCode != 200 || !strings.Contains(body, "dev page of dev") || resp.Request.URL.String() != page {
		t.Fatalf("signed in: ended at %v with %d %q", resp.Request.URL, resp.StatusCode, body)
	}
	if want := []string{host + "/.agentic-preview/auth", host + "/app"}; strings.Join(hops, " ") != strings.Join(want, " ") {
		t.Fatalf("hops %q, want %q", hops, want)
	}
	var previewCookies, mainCookies int
	for _, ck := range jar.Cookies(&url.URL{Scheme: "http", Host: host, Path: "/"}) {
		if ck.Name == CookieName {
			previewCookies++
		}
	}
	for _, ck := range jar.Cookies(u) {
		if ck.Name == CookieName {
			mainCookies++
		}
	}
	if previewCookies != 1 || mainCookies != 0 {
		t.Fatalf("preview cookies: %d on the preview host, %d on the main host", previewCookies, mainCookies)
	}
	// The cookie is the credential from now on: XHR, and the app sees only
	// its own cookie.
	resp, body = r.get(t, c, "GET", "http://"+host+"/echo", hdr{"Accept": "application/json"})
	if e := r.echoOf(t, body); resp.StatusCode != 200 || e.Header.Get("Cookie") != "theme=dark" {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
	if r.app.sawURI("agentic-preview") || r.app.sawURI("code=") {
		t.Fatal("the sign-in code reached the app")
	}
	// The cookie is for this host alone: another environment's preview
	// host, another port of the same one.
	for _, other := range []string{r.host(5173, "other"), r.host(3000, "dev")} {
		resp, _ = r.get(t, c, "GET", "http://"+other+"/echo", hdr{"Accept": "application/json", "Cookie": r.previewCookie(host)})
		if resp.StatusCode != 401 {
			t.Fatalf("host %s took %s's cookie: %d", other, host, resp.StatusCode)
		}
	}
}

func TestSignInCodeOnceAndForItsHost(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	host := r.host(5173, "dev")
	sess := r.sessionCookie()
	mint := func(h string) string {
		resp, _ := r.get(t, c, "GET", r.mainURL("/preview-signin?"+url.Values{"host": {h}, "next": {"/x"}}.Encode()), hdr{"Cookie": sess.Name + "=" + sess.Value})
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || err != nil || loc.Host != h || loc.Path != "/.agentic-preview/auth" || loc.Query().Get("code") == "" {
			t.Fatalf("minting for %s: %d %q", h, resp.StatusCode, resp.Header.Get("Location"))
		}
		return loc.String()
	}
	auth := mint(host)
	resp, _ := r.get(t, c, "GET", auth, nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/x" {
		t.Fatalf("first use: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == CookieName {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Domain != "" || ck.MaxAge != 3600 || ck.Path != "/" || ck.Secure {
		t.Fatalf("cookie %+v", ck)
	}
	resp, body := r.get(t, c, "GET", auth, hdr{"Accept": "text/html"})
	if resp.StatusCode != 403 || !strings.Contains(body, "used up") {
		t.Fatalf("second use: %d %q", resp.StatusCode, body)
	}
	// A code minted for host A, taken to host B: refused, and spent.
	authA := mint(host)
	other := r.host(5173, "other")
	resp, body = r.get(t, c, "GET", strings.Replace(authA, host, other, 1), nil)
	if resp.StatusCode != 403 || errorCode(t, body) != "forbidden" {
		t.Fatalf("code of A on B: %d %q", resp.StatusCode, body)
	}
	if resp, _ = r.get(t, c, "GET", authA, nil); resp.StatusCode != 403 {
		t.Fatalf("a code tried on another host still worked on its own: %d", resp.StatusCode)
	}
	// Expired after 60 s.
	authA = mint(host)
	r.clock.Advance(codeTTL)
	if resp, _ = r.get(t, c, "GET", authA, nil); resp.StatusCode != 403 {
		t.Fatalf("an expired code: %d", resp.StatusCode)
	}
	// The cookie ends with its hour.
	r.clock.Set(r.clock.Now().Add(-codeTTL))
	h := hdr{"Cookie": ck.Name + "=" + ck.Value, "Accept": "application/json"}
	if resp, _ = r.get(t, c, "GET", "http://"+host+"/echo", h); resp.StatusCode != 200 {
		t.Fatalf("fresh cookie: %d", resp.StatusCode)
	}
	r.clock.Advance(CookieTTL)
	if resp, _ = r.get(t, c, "GET", "http://"+host+"/echo", h); resp.StatusCode != 401 {
		t.Fatalf("cookie after its hour: %d", resp.StatusCode)
	}
}

func TestSignInRefusesOpenRedirects(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	sess := r.sessionCookie()
	for _, q := range []url.Values{
		{"host": {"evil.example"}, "next": {"/"}},
		{"host": {"localhost:" + r.port}, "next": {"/"}},
		{"host": {"5173-dev.evil.example:" + r.port}, "next": {"/"}},
		{"host": {"5173-dev.localhost:1"}, "next": {"/"}}, // not this server's port
		{"host": {r.host(5173, "dev")}, "next": {"//evil.example/"}},
		{"host": {r.host(5173, "dev")}, "next": {"/\\evil.example/"}},
		{"host": {r.host(5173, "dev")}, "next": {"https://evil.example/"}},
		{"host": {r.host(5173, "dev")}, "next": {""}},
	} {
		resp, body := r.get(t, c, "GET", r.mainURL("/preview-signin?"+q.Encode()), hdr{"Cookie": sess.Name + "=" + sess.Value})
		if resp.StatusCode != 400 || resp.Header.Get("Location") != "" || errorCode(t, body) != "invalid_request" {
			t.Fatalf("%v: %d %q", q, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// A next that names another host never leaves the auth endpoint either.
	resp, _ := r.get(t, c, "GET", r.mainURL("/preview-signin?"+url.Values{"host": {r.host(5173, "dev")}, "next": {"/"}}.Encode()), hdr{"Cookie": sess.Name + "=" + sess.Value})
	loc, _ := url.Parse(resp.Header.Get("Location"))
	q := loc.Query()
	q.Set("next", "//evil.example/")
	loc.RawQuery = q.Encode()
	resp, _ = r.get(t, c, "GET", loc.String(), nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/" {
		t.Fatalf("auth with next //evil: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestPreviewCookieIsNotAnAPICredential(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	cookie := r.previewCookie(r.host(5173, "dev"))
	resp, body := r.get(t, c, "GET", r.mainURL("/api/v1/environments?x=1"), hdr{"Cookie": cookie, "Authorization": "Bearer something"})
	if resp.StatusCode != 200 || body != "the API" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	got := r.apiRequests()
	if len(got) != 1 || got[0].Header.Get("Cookie") != cookie || got[0].Header.Get("Authorization") != "Bearer something" || got[0].URL.RequestURI() != "/api/v1/environments?x=1" {
		t.Fatalf("the API got %+v", got)
	}
	// Nor a credential of the path form.
	resp, body = r.get(t, c, "GET", r.mainURL("/preview/dev/5173/echo"), hdr{"Cookie": cookie})
	if resp.StatusCode != 401 || errorCode(t, body) != "unauthorized" {
		t.Fatalf("path form with a preview cookie: %d %q", resp.StatusCode, body)
	}
}

func TestPublicPortUntilItExpires(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	host := r.host(5173, "dev")
	if err := r.public.SetPublic("dev", 5173, r.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	resp, body := r.get(t, c, "GET", "http://"+host+"/", hdr{"Accept": "text/html"})
	if resp.StatusCode != 200 || !strings.Contains(body, "dev page") {
		t.Fatalf("public page: %d %q", resp.StatusCode, body)
	}
	c2, _, err := r.wsDial(t, host, "/ws", nil)
	if err != nil {
		t.Fatalf("public WebSocket: %v", err)
	}
	wsEcho(t, c2, "dev")
	c2.Close()
	// Another port of the same environment is not public.
	if resp, _ = r.get(t, c, "GET", "http://"+r.host(3000, "dev")+"/", nil); resp.StatusCode != 401 {
		t.Fatalf("port 3000: %d", resp.StatusCode)
	}
	r.clock.Advance(time.Hour)
	if resp, _ = r.get(t, c, "GET", "http://"+host+"/", hdr{"Accept": "text/html"}); resp.StatusCode != http.StatusFound {
		t.Fatalf("expired public page: %d", resp.StatusCode)
	}
	if resp, _ = r.get(t, c, "GET", "http://"+host+"/echo", nil); resp.StatusCode != 401 {
		t.Fatalf("expired public XHR: %d", resp.StatusCode)
	}
}

func TestErrorsAnsweredByThePreview(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	for _, tc := range []struct {
		host   string
		status int
		code   string
		page   string
	}{
		{r.host(5999, "dev"), 502, "port_not_listening", "Nothing listens on port 5999 in dev"},
		{r.host(5173, "nope"), 404, "environment_not_found", "no environment or agent named"},
		{r.host(5173, "dup"), 404, "environment_not_found", "path form"},
		{r.host(5173, "offline"), 503, "agent_not_connected", "not connected"},
		{r.host(6000, "dev"), 503, "too_many_forwards", "as many forwarded connections"},
		{r.host(22, "dev"), 403, "port_refused", "may not be reached"},
	} {
		h := bearerHdr()
		h["Accept"] = "application/json"
		resp, body := r.get(t, c, "GET", "http://"+tc.host+"/", h)
		if resp.StatusCode != tc.status || errorCode(t, body) != tc.code {
			t.Fatalf("%s: %d %q", tc.host, resp.StatusCode, body)
		}
		h["Accept"] = "text/html"
		resp, body = r.get(t, c, "GET", "http://"+tc.host+"/", h)
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(strings.ToLower(body), strings.ToLower(tc.page)) {
			t.Fatalf("%s page: %d %q", tc.host, resp.StatusCode, body)
		}
	}
	// The exact name works through the path form.
	resp, body := r.get(t, c, "GET", r.mainURL("/preview/dup/5173/"), bearerHdr())
	if resp.StatusCode != 502 || errorCode(t, body) != "port_not_listening" {
		t.Fatalf("path form of Dup's twin: %d %q", resp.StatusCode, body)
	}
	// The path form of a name the host form cannot tell apart: the dialer
	// was asked for the exact agent.
	if d := r.dialer.dialed(); d[len(d)-1] != "dup/5173" {
		t.Fatalf("dialed %q", d)
	}
}

func TestPathForm(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	sess := r.sessionCookie()
	cookies := "theme=dark; " + sess.Name + "=" + sess.Value

	resp, body := r.get(t, c, "GET", r.mainURL("/preview/dev/5173/echo?q=1"), hdr{"Cookie": cookies, "Sec-Fetch-Site": "none", "Accept": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != sandboxCSP {
		t.Fatalf("CSP %q", csp)
	}
	e := r.echoOf(t, body)
	if e.URI != "/echo?q=1" || e.Header.Get("X-Forwarded-Prefix") != "/preview/dev/5173" || e.Header.Get("Cookie") != "theme=dark" || e.Host != "localhost:5173" {
		t.Fatalf("the app saw %+v", e)
	}
	// Bearer, escaped path kept as sent, Set-Cookie dropped on the API's origin.
	resp, body = r.get(t, c, "GET", r.mainURL("/preview/dev/5173/echo/a%2Fb"), bearerHdr())
	if e := r.echoOf(t, body); resp.StatusCode != 200 || e.URI != "/echo/a%2Fb" || e.Header.Get("Authorization") != "" {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
	resp, _ = r.get(t, c, "GET", r.mainURL("/preview/dev/5173/set-cookie"), bearerHdr())
	if resp.StatusCode != 200 || len(resp.Header.Values("Set-Cookie")) != 0 || resp.Header.Get("Content-Security-Policy") != sandboxCSP {
		t.Fatalf("path form passed Set-Cookie: %v", resp.Header)
	}
	// The trailing slash.
	resp, _ = r.get(t, c, "GET", r.mainURL("/preview/dev/5173?x=1"), nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/preview/dev/5173/?x=1" {
		t.Fatalf("no slash: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The session cookie does not sign in a page's own requests (a
	// sandboxed page is cross-site to everything), another site, or a
	// state change without this server's Origin.
	signedOut := r.sessionCookie()
	if err := r.signIns.End(signedOut.Value); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]hdr{
		"signed out":      {"Cookie": signedOut.Name + "=" + signedOut.Value},
		"cross-site":      {"Cookie": cookies, "Sec-Fetch-Site": "cross-site"},
		"same-site":       {"Cookie": cookies, "Sec-Fetch-Site": "same-site"},
		"foreign origin":  {"Cookie": cookies, "Origin": "http://5173-dev.localhost:" + r.port},
		"opaque origin":   {"Cookie": cookies, "Origin": "null"},
		"no such session": {"Cookie": signin.CookieName + "=" + strings.Repeat("A", 43)},
	} {
		if resp, body = r.get(t, c, "GET", r.mainURL("/preview/dev/5173/echo"), h); resp.StatusCode != 401 {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, body)
		}
	}
	if resp, _ = r.get(t, c, "POST", r.mainURL("/preview/dev/5173/echo"), hdr{"Cookie": cookies}); resp.StatusCode != 401 {
		t.Fatalf("POST without Origin: %d", resp.StatusCode)
	}
	resp, body = r.get(t, c, "POST", r.mainURL("/preview/dev/5173/echo"), hdr{"Cookie": cookies, "Origin": r.mainURL(""), "Sec-Fetch-Site": "same-origin"})
	if e := r.echoOf(t, body); resp.StatusCode != 200 || e.Method != "POST" {
		t.Fatalf("POST from this server's page: %d %q", resp.StatusCode, body)
	}
	// A page load without credentials is told where to sign in.
	resp, body = r.get(t, c, "GET", r.mainURL("/preview/dev/5173/app"), hdr{"Accept": "text/html"})
	if resp.StatusCode != 401 || !strings.Contains(body, "http://5173-dev.localhost:"+r.port+"/") || r.app.sawURI("/app") {
		t.Fatalf("page without sign-in: %d %q", resp.StatusCode, body)
	}
	// Bad paths.
	for _, p := range []string{"/preview/dev/0/", "/preview/dev/65536/", "/preview/dev/05173/", "/preview/-x/5173/", "/preview/dev"} {
		if resp, _ = r.get(t, c, "GET", r.mainURL(p), bearerHdr()); resp.StatusCode != 404 {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
	}
	// The WebSocket through the path form.
	ws, _, err := r.wsDial(t, "localhost:"+r.port, "/preview/dev/5173/ws", http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	wsEcho(t, ws, "dev")
	ws.Close()
}

func TestConnectionsKeyedPerTarget(t *testing.T) {
	r := newRig(t, false)
	other := newDevApp(t, "other")
	r.dialer.mu.Lock()
	r.dialer.targets[key("other", 5173)] = other.srv.Listener.Addr().String()
	r.dialer.mu.Unlock()
	c := r.client(nil, false)
	for i := range 6 {
		name := []string{"dev", "other"}[i%2]
		resp, body := r.get(t, c, "GET", "http://"+r.host(5173, name)+"/echo", bearerHdr())
		if e := r.echoOf(t, body); resp.StatusCode != 200 || e.Who != name {
			t.Fatalf("request %d for %s answered by %q", i, name, e.Who)
		}
	}
}

func TestReservedPathsOnPreviewHosts(t *testing.T) {
	r := newRig(t, false)
	c := r.client(nil, false)
	resp, _ := r.get(t, c, "GET", "http://"+r.host(5173, "dev")+"/.agentic-preview/other", bearerHdr())
	if resp.StatusCode != 404 || r.app.sawURI("agentic-preview") {
		t.Fatalf("%d", resp.StatusCode)
	}
	// Even /api/… of a preview host is the app's, never the API's.
	resp, body := r.get(t, c, "GET", "http://"+r.host(5173, "dev")+"/api/v1/environments", bearerHdr())
	if resp.StatusCode != 200 || !strings.Contains(body, "dev page") || len(r.apiRequests()) != 0 {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func TestParsePreviewHost(t *testing.T) {
	for host, want := range map[string]string{
		"5173-dev.localhost":          "5173 dev",
		"5173-dev.localhost:8122":     "5173 dev",
		"5173-DEV.LocalHost:8122":     "5173 dev",
		"1-a.localhost":               "1 a",
		"65535-my-env.localhost":      "65535 my-env",
		"8080-a.b.c.localhost":        "8080 a.b.c",
		"8080-x_y.localhost.":         "8080 x_y",
		"0-dev.localhost":             "",
		"05173-dev.localhost":         "",
		"65536-dev.localhost":         "",
		"5173.localhost":              "",
		"5173-.localhost":             "",
		"5173--x.localhost":           "",
		"5173-dev.localhost.evil.com": "",
		"dev.localhost":               "",
		"localhost:8122":              "",
		"5173-dev.localhost:0":        "",
		"5173-dev.localhost:x":        "",
		"5173-dev.notlocalhost":       "",
		"[::1]:8122":                  "",
	} {
		p, ok := parsePreviewHost(host, "localhost")
		got := ""
		if ok {
			got = strconv.Itoa(int(p.port)) + " " + p.name
		}
		if got != want {
			t.Errorf("%q: %q, want %q", host, got, want)
		}
	}
}

func TestCodeStoreIsBounded(t *testing.T) {
	s := newCodeStore(8)
	now := time.Unix(1_900_000_000, 0)
	first := s.mint("a", now)
	var last string
	for i := range 20 {
		last = s.mint("a", now.Add(time.Duration(i+1)*time.Millisecond))
	}
	if len(s.codes) != 8 {
		t.Fatalf("%d codes kept, want 8", len(s.codes))
	}
	if s.take(first, "a", now) {
		t.Fatal("the oldest code survived a full store")
	}
	if !s.take(last, "a", now) || s.take(last, "a", now) {
		t.Fatal("the newest code: not taken once")
	}
	// Expired codes go first.
	s = newCodeStore(2)
	old := s.mint("a", now)
	keep := s.mint("a", now.Add(30*time.Second))
	s.mint("a", now.Add(codeTTL+time.Second))
	if _, ok := s.codes[old]; ok {
		t.Fatal("an expired code kept over a live one")
	}
	if !s.take(keep, "a", now.Add(codeTTL+time.Second)) {
		t.Fatal("a live code dropped")
	}
}

// A request body may take longer than the listener's read timeout (the
// REST listener's bounds API requests): an upload to the app goes on.
func TestASlowUploadOutlivesTheListenersReadTimeout(t *testing.T) {
	r := newRig(t, false)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(bytes.Repeat([]byte("a"), 1000))
		time.Sleep(3 * rigReadTimeout) // the body is still coming past the listener's timeout
		_, _ = pw.Write(bytes.Repeat([]byte("b"), 1000))
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", "http://"+r.host(5173, "dev")+"/upload", pr)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := r.client(nil, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "2000" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}

// A client speaking HTTP/2 (h2c with prior knowledge, as the REST listener
// serves it) gets the page and a streamed body the same way.
func TestPreviewOverHTTP2(t *testing.T) {
	r := newRig(t, false)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{DialContext: r.dial, Protocols: p, DisableCompression: true}, Timeout: 2 * patience}
	req, _ := http.NewRequest("GET", "http://"+r.host(5173, "dev")+"/", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.Contains(string(body), "dev page of dev") {
		t.Fatalf("%s %d %q", resp.Proto, resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", "http://"+r.host(5173, "dev")+"/download", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.ProtoMajor != 2 || n != downloadSize {
		t.Fatalf("download over %s: %d bytes, %v", resp.Proto, n, err)
	}
}
