package org.bulkbloom.flink.bench;

import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/** Counts the records the dedup keeps and notes when the first and the stream's last arrive. */
public final class CountingSink implements Sink<Event> {
  @Override
  public SinkWriter<Event> createWriter(WriterInitContext context) {
    return new SinkWriter<>() {
      @Override
      public void write(Event event, Context context) {
        RunClock.markOutput(event.id);
      }

      @Override
      public void flush(boolean endOfInput) {}

      @Override
      public void close() {}
    };
  }
}
