// The page's editor: CodeMirror 6 with Python highlighting, indentation, Tab and Ctrl/Cmd-S.
// Bundled once into ../editor.js by build.sh (learners need no node); see README.md.
import {EditorState} from "@codemirror/state";
import {EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
        drawSelection, highlightSpecialChars} from "@codemirror/view";
import {defaultKeymap, history, historyKeymap, indentWithTab} from "@codemirror/commands";
import {indentOnInput, bracketMatching, syntaxHighlighting, defaultHighlightStyle, indentUnit} from "@codemirror/language";
import {python} from "@codemirror/lang-python";

// create(parent, text, {onChange(), onSave()}) -> {get(), set(text), focus()}
function create(parent, text, hooks) {
  const save = {key: "Mod-s", preventDefault: true, run: () => { hooks.onSave(); return true; }};
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: text,
      extensions: [
        lineNumbers(), highlightActiveLineGutter(), highlightSpecialChars(), history(), drawSelection(),
        indentOnInput(), bracketMatching(), highlightActiveLine(), indentUnit.of("    "),
        EditorState.tabSize.of(4), syntaxHighlighting(defaultHighlightStyle, {fallback: true}), python(),
        keymap.of([save, indentWithTab, ...defaultKeymap, ...historyKeymap]),
        EditorView.updateListener.of(u => { if (u.docChanged) hooks.onChange(); }),
        EditorView.lineWrapping,
      ],
    }),
  });
  return {
    get: () => view.state.doc.toString(),
    set: (t) => view.dispatch({changes: {from: 0, to: view.state.doc.length, insert: t}}),
    focus: () => view.focus(),
    view,
  };
}

window.TBHEditor = {create};
