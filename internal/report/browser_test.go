package report_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

// unavailable ends a test that cannot run its browser: a skip normally, a
// failure when real tests are required (CGWARDEN_REQUIRE_REAL=1, as in
// .ci/run, which installs the chromium package). The variable is read
// here rather than through package realtest: the cgroup v2 lane runs
// every package whose tests use realtest in a guest without a browser,
// and this test does not depend on the kernel.
func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CGWARDEN_REQUIRE_REAL") == "1" {
		t.Fatalf("browser test cannot run (%s) and CGWARDEN_REQUIRE_REAL=1", why)
	}
	t.Skipf("browser test skipped: %s (set CGWARDEN_REQUIRE_REAL=1 to make this a failure)", why)
}

// chromium finds Debian's headless-capable browser, or ends the test.
func chromium(t *testing.T) string {
	t.Helper()
	return realtest.HostTool(t, "chromium", "chromium", "chromium-browser")
}

// runChromium runs the browser headless on file at width×900 with extra
// flags and returns its stdout.
func runChromium(t *testing.T, bin, file string, width int, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + t.TempDir(),
		"--window-size=" + strconv.Itoa(width) + ",900"}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+file)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		unavailable(t, "chromium did not run: "+err.Error()+"\n"+stderr.String())
	}
	return stdout.Bytes()
}

// nonWhite counts the pixels of a PNG that are not (near) white.
func nonWhite(t *testing.T, file string) (n, total int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", file, err)
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				n++
			}
		}
	}
	return n, b.Dx() * b.Dy()
}

// Headless Chromium will not make a window narrower than 500 px, so a
// phone's width is given to the page by an iframe 390 px wide in a
// wrapper page. scrollProbe is appended to a copy of the report (the
// report itself has no script): once laid out, it posts the document's
// width and its viewport's to the wrapper, which writes them into its
// DOM for --dump-dom to print.
const scrollProbe = `<script>addEventListener("load", function () {
  parent.postMessage(document.documentElement.scrollWidth + " " + window.innerWidth, "*");
});</script>`

const phoneFrame = `<!DOCTYPE html>
<html><body style="margin:0">
<iframe src="%s" style="border:0;width:390px;height:900px;display:block"></iframe>
<script>addEventListener("message", function (e) {
  var p = document.createElement("div");
  p.id = "scroll-probe";
  p.textContent = e.data;
  document.body.appendChild(p);
});</script>
</body></html>
`

var probeRE = regexp.MustCompile(`<div id="scroll-probe">(\d+) (\d+)</div>`)

// phone writes the wrapper that shows page at a phone's width.
func phone(t *testing.T, dir, name, page string) string {
	t.Helper()
	f := filepath.Join(dir, name+"-phone.html")
	if err := os.WriteFile(f, []byte(fmt.Sprintf(phoneFrame, page)), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestInARealBrowser renders every example report and a demo report in
// headless Chromium at a desktop width (1280) and a phone's (390): the
// screenshots are not blank, and at phone width the page does not scroll
// sideways (scrollWidth <= innerWidth, measured by a probe script in a
// copy of the page).
func TestInARealBrowser(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	for name, page := range pages(t) {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".html")
			if err := os.WriteFile(file, page, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, width := range []int{1280, 390} {
				shot := filepath.Join(dir, name+"-"+strconv.Itoa(width)+".png")
				target := file
				if width < 500 {
					target = phone(t, dir, name, name+".html")
				}
				runChromium(t, bin, target, width, "--screenshot="+shot, "--hide-scrollbars")
				n, total := nonWhite(t, shot)
				t.Logf("%s at %d px: %d of %d pixels not white", name, width, n, total)
				if n < total/100 {
					t.Errorf("%s at %d px: screenshot nearly blank (%d of %d pixels not white)", name, width, n, total)
				}
			}
			probe := filepath.Join(dir, name+"-probe.html")
			withProbe := strings.Replace(string(page), "</body>", scrollProbe+"\n</body>", 1)
			if err := os.WriteFile(probe, []byte(withProbe), 0o644); err != nil {
				t.Fatal(err)
			}
			dom := runChromium(t, bin, phone(t, dir, name+"-probe", name+"-probe.html"), 390, "--virtual-time-budget=3000", "--dump-dom")
			m := probeRE.FindSubmatch(dom)
			if m == nil {
				t.Fatalf("%s: the probe wrote nothing into the DOM:\n%.2000s", name, dom)
			}
			sw, _ := strconv.Atoi(string(m[1]))
			iw, _ := strconv.Atoi(string(m[2]))
			t.Logf("%s at 390 px: scrollWidth %d, innerWidth %d", name, sw, iw)
			if iw != 390 {
				t.Fatalf("%s: the page was laid out %d px wide, not at a phone's 390", name, iw)
			}
			if sw > iw {
				t.Errorf("%s scrolls sideways at phone width: scrollWidth %d > innerWidth %d", name, sw, iw)
			}
		})
	}
}
