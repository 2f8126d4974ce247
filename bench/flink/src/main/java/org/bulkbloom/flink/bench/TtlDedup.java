package org.bulkbloom.flink.bench;

import java.time.Duration;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Flink's idiomatic dedup, the baseline: one {@code ValueState<Boolean>} per id with state TTL.
 * Flink's TTL runs on processing time only, so the window is T of the job's wall clock, not of the
 * events' time. Every arrival rewrites the flag, so an id stays until it has been quiet for T (the
 * same rule as bulkbloom's window, which inserts dropped repeats again).
 */
public final class TtlDedup extends KeyedProcessFunction<Long, Event, Event> {
  private final Duration window;
  private transient ValueState<Boolean> seen;

  public TtlDedup(Duration window) {
    this.window = window;
  }

  @Override
  public void open(OpenContext context) {
    StateTtlConfig ttl =
        StateTtlConfig.newBuilder(window)
            .setUpdateType(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .setStateVisibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build();
    ValueStateDescriptor<Boolean> descriptor = new ValueStateDescriptor<>("seen", Types.BOOLEAN);
    descriptor.enableTimeToLive(ttl);
    seen = getRuntimeContext().getState(descriptor);
  }

  @Override
  public void processElement(Event event, Context context, Collector<Event> out) throws Exception {
    boolean repeat = seen.value() != null;
    seen.update(Boolean.TRUE);
    if (!repeat) {
      out.collect(event);
    }
  }
}
