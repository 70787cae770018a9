//go:build ignore

// modzip writes a file-based Go module proxy (GOPROXY=file://DIR) holding every module of
// this repository at one version, laid out as the go command expects
// (https://go.dev/ref/mod#goproxy-protocol): for each module path P,
// DIR/P/@v/{list,VERSION.info,VERSION.mod,VERSION.zip}. Each zip holds the files of its
// module under "P@VERSION/", as the go command would make them from a tagged commit: files
// that git tracks or would track (.gitignore'd ones are left out), without the directories
// of nested modules, vendor directories or symlinks.
//
// Usage (from the repository root): go run docs/modzip.go -out DIR [-version v0.1.0]
// It prints one line per module: "PATH DIR".
package main

import (
	"archive/zip"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

func main() {
	out := flag.String("out", "", "proxy directory to write (created)")
	version := flag.String("version", "v0.1.0", "version to publish every module at")
	flag.Parse()
	if *out == "" {
		fail(fmt.Errorf("-out is required"))
	}
	files, err := gitFiles()
	if err != nil {
		fail(err)
	}
	// Module roots: every directory with a go.mod among those files.
	var roots []string
	for _, f := range files {
		if path.Base(f) == "go.mod" {
			roots = append(roots, path.Dir(f))
		}
	}
	sort.Strings(roots)
	for _, root := range roots {
		modPath, gomod, err := readModule(root)
		if err != nil {
			fail(err)
		}
		var own []string
		for _, f := range files {
			if owner(f, roots) == root {
				own = append(own, f)
			}
		}
		if err := publish(*out, modPath, *version, root, gomod, own); err != nil {
			fail(err)
		}
		fmt.Println(modPath, root)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "modzip:", err)
	os.Exit(1)
}

// gitFiles lists the tracked and untracked-but-not-ignored files that exist, slash-separated.
func gitFiles() ([]string, error) {
	raw, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(string(raw), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		fi, err := os.Lstat(filepath.FromSlash(f))
		if err != nil || !fi.Mode().IsRegular() { // deleted in the work tree, or a symlink
			continue
		}
		out = append(out, f)
	}
	sort.Strings(out)
	return out, nil
}

// owner returns the innermost module root containing f ("." is the repository root).
func owner(f string, roots []string) string {
	best := ""
	for _, r := range roots {
		if r == "." || strings.HasPrefix(f, r+"/") {
			if len(r) > len(best) || best == "" {
				best = r
			}
		}
	}
	return best
}

func readModule(root string) (string, []byte, error) {
	gomod, err := os.ReadFile(filepath.Join(filepath.FromSlash(root), "go.mod"))
	if err != nil {
		return "", nil, err
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), gomod, nil
		}
	}
	return "", nil, fmt.Errorf("%s/go.mod has no module line", root)
}

func publish(out, modPath, version, root string, gomod []byte, files []string) error {
	esc, err := escape(modPath)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	prefix := modPath + "@" + version + "/"
	for _, f := range files {
		rel := f
		if root != "." {
			rel = strings.TrimPrefix(f, root+"/")
		}
		if isVendored(rel) {
			continue
		}
		data, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			return err
		}
		w, err := zw.Create(prefix + rel)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`+"\n", version, time.Now().UTC().Format(time.RFC3339))
	for name, data := range map[string][]byte{
		"list": []byte(version + "\n"), version + ".info": []byte(info),
		version + ".mod": gomod, version + ".zip": buf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// isVendored reports whether rel lies in a vendor directory, which module zips leave out.
func isVendored(rel string) bool {
	return strings.HasPrefix(rel, "vendor/") || strings.Contains(rel, "/vendor/")
}

// escape applies the module proxy's case encoding: each upper-case letter becomes '!' and
// its lower-case form.
func escape(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r == '!' || r >= unicode.MaxASCII:
			return "", fmt.Errorf("module path %q cannot be escaped", p)
		case unicode.IsUpper(r):
			b.WriteByte('!')
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
