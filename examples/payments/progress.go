package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws one status line on stderr: redrawn in place with \r on a terminal, a plain
// line every few seconds otherwise (a log file should not fill with carriage returns).
type progress struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	n      int
	counts func() (done, ok, failed, crashes int)
	drawn  int // width of the line on screen, to blank it
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newProgress(w io.Writer, n int, counts func() (done, ok, failed, crashes int)) *progress {
	f, isFile := w.(*os.File)
	tty := false
	if isFile {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{w: w, tty: tty, n: n, counts: counts, stop: make(chan struct{})}
}

// start redraws the line until finish.
func (p *progress) start() {
	every := 2 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw()
				p.mu.Unlock()
			}
		}
	})
}

// finish draws the last state and ends the line.
func (p *progress) finish() {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw()
	if p.tty {
		fmt.Fprintln(p.w)
		p.drawn = 0
	}
}

// println prints msg on its own line, above the progress line.
func (p *progress) println(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(p.w, msg)
}

// writer returns a writer for the children's stderr that does not garble the line.
func (p *progress) writer() io.Writer { return progressWriter{p} }

type progressWriter struct{ p *progress }

func (pw progressWriter) Write(b []byte) (int, error) {
	pw.p.mu.Lock()
	defer pw.p.mu.Unlock()
	pw.p.clear()
	return pw.p.w.Write(b)
}

func (p *progress) clear() {
	if p.tty && p.drawn > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.drawn))
		p.drawn = 0
	}
}

func (p *progress) draw() {
	done, ok, failed, crashes := p.counts()
	const width = 30
	filled := width * done / max(p.n, 1)
	line := fmt.Sprintf("[%s%s] %d/%d done  ok %d  failed %d  crashes %d",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, p.n, ok, failed, crashes)
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", max(p.drawn-len(line), 0)))
	p.drawn = len(line)
}
