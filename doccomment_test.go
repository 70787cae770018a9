package idem_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every exported identifier, exported struct field and exported interface method of every
// package in the repository's modules (the root and the nested ones below it) has a doc
// comment or a line comment, as go doc shows them. Test files, generated files, testdata and
// hidden directories are skipped.
func TestExportedIdentifiersAreDocumented(t *testing.T) {
	var missing []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil // generated code (oapi-codegen) is documented at its source
		}
		missing = append(missing, undocumented(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("%d exported identifiers without a doc or line comment:\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

// undocumented lists f's exported declarations without a comment, as "file:line: name".
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var out []string
	miss := func(pos token.Pos, name string) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(p.Filename), p.Line, name))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil {
				recv := receiverName(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue // a method of an unexported type is not in go doc
				}
				name = recv + "." + name
			}
			if d.Doc == nil {
				miss(d.Pos(), name)
			}
		case *ast.GenDecl:
			// A parenthesised group's doc comment covers its members, as go doc shows them.
			groupDoc := d.Lparen.IsValid() && d.Doc != nil
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if s.Doc == nil && s.Comment == nil && d.Doc == nil {
						miss(s.Pos(), s.Name.Name)
					}
					fieldsOf(s.Name.Name, s.Type, miss)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && s.Comment == nil && !groupDoc && (d.Lparen.IsValid() || d.Doc == nil) {
							miss(n.Pos(), n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// fieldsOf reports the exported fields of a struct type and the methods of an interface
// type without a comment, named "Type.Field"; nested struct types are walked too.
func fieldsOf(owner string, typ ast.Expr, miss func(token.Pos, string)) {
	switch t := typ.(type) {
	case *ast.StructType:
		for _, fld := range t.Fields.List {
			for _, n := range fld.Names { // embedded fields are documented at their type
				if n.IsExported() && fld.Doc == nil && fld.Comment == nil {
					miss(n.Pos(), owner+"."+n.Name)
				}
			}
			for _, n := range fld.Names {
				if n.IsExported() {
					fieldsOf(owner+"."+n.Name, fld.Type, miss)
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() && m.Doc == nil && m.Comment == nil {
					miss(n.Pos(), owner+"."+n.Name)
				}
			}
		}
	case *ast.StarExpr:
		fieldsOf(owner, t.X, miss)
	case *ast.ArrayType:
		fieldsOf(owner, t.Elt, miss)
	case *ast.MapType:
		fieldsOf(owner, t.Value, miss)
	}
}

// receiverName is the type name of a method's receiver: T, *T, T[P] or *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
