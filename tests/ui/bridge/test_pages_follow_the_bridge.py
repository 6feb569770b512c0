"""#44: the pages the main window wired to the bridge follow it themselves, given the bridge: a page built alone
(no window wiring) takes the loaded model, yields indexing to answers, and so on."""

from __future__ import annotations


def test_pages_built_alone_follow_the_bridge(qtbot, idle_window, bundled_model):
    from app.ui.bench.bench_view import BenchView
    from app.ui.docs.documents_page import DocumentsPage
    from app.ui.connections.server_page import ServerPage
    from app.ui.tools.tools_page import ToolsPage

    bridge = idle_window.bridge
    bench, tools = BenchView(bridge, lambda info: "the bundled model"), ToolsPage(bridge)
    documents, server = DocumentsPage(bridge), ServerPage(bridge.local, {}, bridge=bridge)
    for page in (bench, tools, documents, server):
        qtbot.addWidget(page)
    info = {"path": str(bundled_model), "n_ctx": 512, "name": "SmolLM2", "tools_trained": True}
    bridge.model_loaded.emit(info)
    assert bench.model_path == str(bundled_model) and "the bundled model" in bench.model_label.text()
    assert not tools.model_line.text().startswith("No model is loaded")
    bridge.generation_started.emit(False)
    assert not documents.runner.gate.is_set()  # indexing waits while the chat model answers
    bridge.generation_finished.emit({})
    assert documents.runner.gate.is_set()
    documents.close_tasks()
    tools.close_tasks()
