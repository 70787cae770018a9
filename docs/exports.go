//go:build ignore

// Command exports counts the exported identifiers of the Go package in a directory (its
// non-test files): functions, methods of exported types, types, constants, variables, and
// the fields of exported struct types, with the package's file and line counts. The
// CHANGELOG records the root package's counts with it:
//
//	go run docs/exports.go .
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		fail(err)
	}
	var n struct{ funcs, methods, types, consts, vars, fields, files, lines int }
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			fail(err)
		}
		if f.Name.Name == "main" || strings.HasSuffix(f.Name.Name, "_test") {
			continue
		}
		n.files++
		n.lines += fset.Position(f.End()).Line
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				switch {
				case !d.Name.IsExported():
				case d.Recv == nil:
					n.funcs++
				case ast.IsExported(recvType(d.Recv.List[0].Type)):
					n.methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							n.types++
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, fl := range st.Fields.List {
									for _, id := range fl.Names {
										if id.IsExported() {
											n.fields++
										}
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if !id.IsExported() {
								continue
							}
							if d.Tok == token.CONST {
								n.consts++
							} else {
								n.vars++
							}
						}
					}
				}
			}
		}
	}
	total := n.funcs + n.methods + n.types + n.consts + n.vars
	fmt.Printf("%s: %d exported identifiers (%d funcs, %d methods, %d types, %d consts, %d vars; and %d exported struct fields) in %d files, %d lines\n",
		dir, total, n.funcs, n.methods, n.types, n.consts, n.vars, n.fields, n.files, n.lines)
}

// recvType is the name of a method's receiver type, through a pointer and type parameters.
func recvType(e ast.Expr) string {
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

func fail(err error) {
	fmt.Fprintln(os.Stderr, "exports:", err)
	os.Exit(1)
}
